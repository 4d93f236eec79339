package infer

import (
	"errors"
	"testing"

	"github.com/sdtool/sdtool/native"
)

// TestLoadWithoutGGML checks what a build without cgo says: Load refuses
// with ErrNoCgo before it touches the file, and LinkedAVX2 is false.
func TestLoadWithoutGGML(t *testing.T) {
	if Available != native.Available {
		t.Fatalf("infer.Available %v, native.Available %v", Available, native.Available)
	}
	if Available {
		t.Skip("ggml is linked")
	}
	if _, err := Load(Components{"model": "no-such-model.gguf"}, LoadOptions{}); !errors.Is(err, ErrNoCgo) {
		t.Errorf("Load: %v, want ErrNoCgo", err)
	}
	if LinkedAVX2() {
		t.Error("LinkedAVX2 without ggml")
	}
}
