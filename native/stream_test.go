//go:build cgo

package native

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func putF32(dst []byte, v ...float32) {
	for i, f := range v {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

// A graph whose weights move between buffers after allocation computes
// with the weights where they are when each node range runs: two weights,
// the second read through a view, rebound between the two ranges.
func TestComputeRangeFollowsBind(t *testing.T) {
	if err := CheckStreamLayout(); err != nil {
		t.Fatal(err)
	}
	be, err := NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	ctx, err := NewContext(16, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	w1, _ := ctx.NewTensor(formats.F32, 4)
	w2, _ := ctx.NewTensor(formats.F32, 8)
	x, _ := ctx.NewTensor(formats.F32, 4)
	x.SetInput()
	buf, err := be.AllocBuffer(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	al := buf.Alignment()
	host := buf.Host()
	// Two places for w2: the first holds 100s, the second the values used.
	putF32(host[0:], 1, 2, 3, 4)
	putF32(host[al:], 100, 100, 100, 100, 100, 100, 100, 100)
	putF32(host[2*al:], 0, 0, 10, 20, 30, 40, 0, 0)
	if err := w1.Bind(buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := w2.Bind(buf, al); err != nil {
		t.Fatal(err)
	}
	if err := w2.Bind(buf, 1024); err == nil {
		t.Error("Bind past the buffer's end succeeded")
	}
	var mid, out Tensor
	func() {
		defer Recover(&err)
		mid = ctx.Mul(x, w1)
		out = ctx.Add(mid, ctx.View(w2, [4]int64{4, 1, 1, 1}, 16, 16, 16, 8)).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(16)
	gr.Expand(out)
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	if err := x.SetF32([]float32{1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	uses := map[Tensor][]int{}
	gr.Operands(func(node int, op Tensor) { uses[op] = append(uses[op], node) })
	// w1 is read by the product; w2 by its view node and, through the
	// view, by the sum.
	if len(uses[w1]) != 1 || len(uses[w2]) != 2 || uses[w1][0] >= uses[w2][0] {
		t.Fatalf("operand uses w1 %v, w2 %v: want one of w1, then two of w2 (the view and the sum)", uses[w1], uses[w2])
	}
	split := uses[w2][0]
	if err := be.ComputeRange(gr, 0, split); err != nil {
		t.Fatal(err)
	}
	if err := w2.Bind(buf, 2*al); err != nil {
		t.Fatal(err)
	}
	gr.RefreshViews()
	if err := be.ComputeRange(gr, split, gr.Nodes()); err != nil {
		t.Fatal(err)
	}
	got, err := out.F32()
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{11, 22, 33, 44}; !slices.Equal(got, want) {
		t.Errorf("x*w1 + w2[2:6] = %v, want %v", got, want)
	}
	if err := be.ComputeRange(gr, 1, 1); err == nil {
		t.Error("an empty node range ran")
	}
}

// Reorder accepts any order in which nodes follow their inputs, computes
// the same values in it, and refuses an order that reads a node before it runs.
func TestReorder(t *testing.T) {
	be, err := NewCPUBackend(1)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Free()
	ctx, err := NewContext(16, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free()
	x, _ := ctx.NewTensor(formats.F32, 2)
	x.SetInput()
	var out Tensor
	func() {
		defer Recover(&err)
		out = ctx.Add(ctx.Add(x, x), ctx.Mul(x, x)).SetOutput()
	}()
	if err != nil {
		t.Fatal(err)
	}
	gr := ctx.NewGraph(16)
	gr.Expand(out)
	in := gr.NodeInputs()
	if len(in) != 3 || len(in[0]) != 0 || len(in[1]) != 0 || !slices.Equal(in[2], []int{0, 1}) {
		t.Fatalf("node inputs %v, want [] [] [0 1]", in)
	}
	if err := gr.Reorder([]int{2, 0, 1}); err == nil {
		t.Error("an order running the sum first was accepted")
	}
	if err := gr.Reorder([]int{0, 0, 2}); err == nil {
		t.Error("an order repeating a node was accepted")
	}
	if err := gr.Reorder([]int{1, 0, 2}); err != nil {
		t.Fatal(err)
	}
	if in := gr.NodeInputs(); !slices.Equal(in[2], []int{1, 0}) {
		t.Errorf("after the swap the sum reads %v, want [1 0]", in[2])
	}
	alloc := be.NewAllocator()
	defer alloc.Free()
	if err := alloc.Alloc(gr); err != nil {
		t.Fatal(err)
	}
	if err := x.SetF32([]float32{2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := be.Compute(gr); err != nil {
		t.Fatal(err)
	}
	if got, _ := out.F32(); !slices.Equal(got, []float32{8, 15}) {
		t.Errorf("2x + x² = %v, want [8 15]", got)
	}
}
