//go:build cgo

package native

import (
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// Copy writes a graph's values into part of a tensor in a buffer of its
// own, converting F32 to F16, and the next graph reads them there: the
// state a video VAE keeps between chunks.
func TestCopyIntoPersistent(t *testing.T) {
	be, err := NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	pctx, err := NewContext(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pctx.Free()
	state, _ := pctx.NewTensor(formats.F16, 3, 2)
	buf, err := be.AllocContext(pctx)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	if err := state.SetData(make([]byte, state.Bytes())); err != nil {
		t.Fatal(err)
	}
	run := func(in []float32, build func(ctx *Context, a Tensor) (out, write Tensor)) []float32 {
		t.Helper()
		ctx, _ := NewContext(16, 16)
		defer ctx.Free()
		a, _ := ctx.NewTensor(formats.F32, 3)
		a.SetInput()
		var out, write Tensor
		func() {
			defer Recover(&err)
			out, write = build(ctx, a)
			out = ctx.Cont(out).SetOutput()
		}()
		if err != nil {
			t.Fatal(err)
		}
		gr := ctx.NewGraph(16)
		gr.Expand(out) // reads the old state first
		if write.Valid() {
			gr.Expand(write)
		}
		alloc := be.NewAllocator()
		defer alloc.Free()
		if err := alloc.Alloc(gr); err != nil {
			t.Fatal(err)
		}
		if err := a.SetF32(in); err != nil {
			t.Fatal(err)
		}
		if err := be.Compute(gr); err != nil {
			t.Fatal(err)
		}
		v, err := out.F32()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	row1 := func(ctx *Context) Tensor {
		return ctx.Cast(row1View(ctx, state), formats.F32)
	}
	// Graph 1 reads row 1 (zeros) and writes 2a there.
	got := run([]float32{0.5, -1.25, 3}, func(ctx *Context, a Tensor) (Tensor, Tensor) {
		old := row1(ctx)
		return ctx.Add(a, old), ctx.Copy(ctx.Scale(a, 2), row1View(ctx, state))
	})
	if want := []float32{0.5, -1.25, 3}; !slices.Equal(got, want) {
		t.Errorf("first graph: %v, want %v", got, want)
	}
	// Graph 2 reads what graph 1 left.
	got = run([]float32{1, 1, 1}, func(ctx *Context, a Tensor) (Tensor, Tensor) { return ctx.Add(a, row1(ctx)), Tensor{} })
	if want := []float32{2, -1.5, 7}; !slices.Equal(got, want) {
		t.Errorf("second graph: %v, want %v", got, want)
	}
}

// row1View is row 1 of a [3, 2] tensor.
func row1View(ctx *Context, t Tensor) Tensor {
	return ctx.View(t, [4]int64{3, 1, 1, 1}, t.Nb()[1], t.Bytes(), t.Bytes(), t.Nb()[1])
}
