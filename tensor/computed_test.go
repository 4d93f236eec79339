package tensor

import (
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// computedModel computes tensor "c.weight" as its element index plus a
// third (values an F16 encoding would round) and stores "s.weight".
type computedModel struct{ *memModel }

func (m computedModel) Computes(t *formats.Tensor) bool { return t.Name == "c.weight" }

func (m computedModel) ReadFloat32(t *formats.Tensor, dst []float32, first int64) error {
	for i := range dst {
		dst[i] = float32(first+int64(i)) + 1.0/3
	}
	return nil
}

// TestComputedSource checks that a computed tensor is read through
// ReadFloat32 (unrounded, any range) and a stored one through its bytes.
func TestComputedSource(t *testing.T) {
	m := computedModel{newMemModel()}
	m.add("c.weight", formats.F16, []int64{4, 8}, make([]byte, 64)) // stored bytes are zeros: never decoded
	stored := randFloats(32, 3)
	b := make([]byte, 64)
	quant.F32ToF16Row(b, stored)
	m.add("s.weight", formats.F16, []int64{4, 8}, b)
	v, err := NewView(m)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := v.Lookup("c.weight")
	got := make([]float32, 5)
	if err := c.Read(got, 3, &Scratch{}); err != nil {
		t.Fatal(err)
	}
	for i, x := range got {
		if want := float32(3+i) + 1.0/3; x != want {
			t.Fatalf("computed element %d = %v, want %v (unrounded)", 3+i, x, want)
		}
	}
	if err := c.Read(make([]float32, 2), 31, &Scratch{}); err == nil {
		t.Error("a computed read past the end succeeded")
	}
	s, _ := v.Lookup("s.weight")
	all := make([]float32, 32)
	if err := s.Read(all, 0, &Scratch{}); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 32)
	quant.DecodeFloats(formats.F16, want, b)
	if !slices.Equal(all, want) {
		t.Error("a stored tensor of a Computed model is not decoded from its bytes")
	}
}
