//go:build cgo

package native

import (
	"errors"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// Abort stops a graph before its next node with ErrAborted, and after
// ResetAbort the same graph computes to its end.
func TestBackendAbort(t *testing.T) {
	be, err := NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	ctx, err := NewContext(8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	a, _ := ctx.NewTensor(formats.F32, 4)
	a.SetInput()
	var out Tensor
	func() {
		defer Recover(&err)
		out = ctx.Add(ctx.Add(a, a), a).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(8)
	gr.Expand(out)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	if err := a.SetF32([]float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	be.Abort()
	if err := be.Compute(gr); !errors.Is(err, ErrAborted) {
		t.Fatalf("Compute after Abort: %v, want ErrAborted", err)
	}
	be.ResetAbort()
	if err := be.Compute(gr); err != nil {
		t.Fatalf("Compute after ResetAbort: %v", err)
	}
	got, err := out.F32()
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{3, 6, 9, 12}; !slices.Equal(got, want) {
		t.Errorf("a+a+a = %v, want %v", got, want)
	}
}
