package imatrix

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats/gguf"
)

// TestAbsMax: activation maxima survive a GGUF round trip beside the sums
// (entries without them stay without), a bad in_absmax tensor is refused
// naming the entry, and Merge keeps the columnwise maximum, or nothing
// when one side does not know it.
func TestAbsMax(t *testing.T) {
	m := &Matrix{ChunkCount: 1, ChunkSize: 1, Entries: []*Entry{
		{Name: "a.weight", NCall: 1, Sum2: []float32{1, 2, 3}, Counts: []float32{1}, AbsMax: []float32{0.5, 7, 2}},
		{Name: "b.weight", NCall: 1, Sum2: []float32{1, 2}, Counts: []float32{1}},
	}}
	read := func(b []byte) (*Matrix, error) {
		g, err := gguf.Parse(bytes.NewReader(b), int64(len(b)), "im.gguf")
		if err != nil {
			t.Fatal(err)
		}
		return ReadGGUF(g)
	}
	var buf bytes.Buffer
	if _, err := WriteGGUF(&buf, m); err != nil {
		t.Fatal(err)
	}
	back, err := read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := back.Lookup("a.weight")
	b, _ := back.Lookup("b.weight")
	if mx, ok := a.Max(); !slices.Equal(a.AbsMax, []float32{0.5, 7, 2}) || !ok || mx != 7 {
		t.Errorf("a: maxima %v (max %v %v)", a.AbsMax, mx, ok)
	}
	if _, ok := b.Max(); b.AbsMax != nil || ok {
		t.Errorf("b has no maxima, read %v", b.AbsMax)
	}

	bad := &Matrix{ChunkCount: 1, ChunkSize: 1, Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{1}, Counts: []float32{1}, AbsMax: []float32{float32(math.NaN())}}}}
	buf.Reset()
	if _, err := WriteGGUF(&buf, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := read(buf.Bytes()); err == nil || !strings.Contains(err.Error(), `entry "w": in_absmax 0 is NaN`) {
		t.Errorf("NaN maximum: %v", err)
	}

	other := &Matrix{Entries: []*Entry{
		{Name: "a.weight", NCall: 1, Sum2: []float32{1, 1, 1}, Counts: []float32{1}, AbsMax: []float32{3, 1, 2}},
		{Name: "b.weight", NCall: 1, Sum2: []float32{1, 1}, Counts: []float32{1}, AbsMax: []float32{1, 1}},
	}}
	merged, err := Merge([]string{"x", "y"}, []*Matrix{back, other}, MergeLlama)
	if err != nil {
		t.Fatal(err)
	}
	a, _ = merged.Lookup("a.weight")
	b, _ = merged.Lookup("b.weight")
	if !slices.Equal(a.AbsMax, []float32{3, 7, 2}) || b.AbsMax != nil {
		t.Errorf("merged maxima: a %v (want [3 7 2]), b %v (want none: x does not know b's)", a.AbsMax, b.AbsMax)
	}
	if got, _ := back.Lookup("a.weight"); !slices.Equal(got.AbsMax, []float32{0.5, 7, 2}) {
		t.Errorf("Merge changed its input: %v", got.AbsMax)
	}
}
