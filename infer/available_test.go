package infer_test

import (
	"errors"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/native"
)

// TestLoadWithoutGGML checks what a build without cgo says: Load refuses
// with ErrNoCgo before it touches the file, and LinkedAVX2 is false.
func TestLoadWithoutGGML(t *testing.T) {
	if infer.Available != native.Available {
		t.Fatalf("infer.Available %v, native.Available %v", infer.Available, native.Available)
	}
	if infer.Available {
		t.Skip("ggml is linked")
	}
	if _, err := infer.Load(infer.Components{"model": "no-such-model.gguf"}, infer.LoadOptions{}); !errors.Is(err, infer.ErrNoCgo) {
		t.Errorf("Load: %v, want ErrNoCgo", err)
	}
	if infer.LinkedAVX2() {
		t.Error("LinkedAVX2 without ggml")
	}
}
