package tensor

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/quant"
)

func randFloats(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

// checkRanges reads every range in a set of odd offsets and lengths and
// compares it with the whole tensor decoded at once.
func checkRanges(t *testing.T, s *Source, want []float32) {
	t.Helper()
	var scratch Scratch
	all := make([]float32, s.Elements())
	if err := s.Read(all, 0, &scratch); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all, want) {
		t.Fatalf("%s: whole read differs from the reference decode", s.Name)
	}
	n := int(s.Elements())
	for _, r := range [][2]int{{0, 1}, {1, 255}, {100, 300}, {255, 2}, {256, 256}, {n - 7, 7}, {3, n - 3}} {
		got := make([]float32, r[1])
		if err := s.Read(got, int64(r[0]), &scratch); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want[r[0]:r[0]+r[1]]) {
			t.Errorf("%s: elements [%d, %d) differ", s.Name, r[0], r[0]+r[1])
		}
	}
	if err := s.Read(make([]float32, 2), int64(n-1), &scratch); err == nil {
		t.Errorf("%s: a read past the end succeeded", s.Name)
	}
}

// TestReadRanges checks element ranges that do not fall on block or row
// boundaries, for a block type, a float type and a convrot module.
func TestReadRanges(t *testing.T) {
	m := newMemModel()
	src := randFloats(4*512, 1)
	q := make([]byte, 4*2*144)
	if err := quant.QuantizeRows(formats.Q4_K, q, src, 512, nil, 1); err != nil {
		t.Fatal(err)
	}
	m.add("q.weight", formats.Q4_K, []int64{4, 512}, q)
	wantQ := make([]float32, len(src))
	if err := quant.DequantizeRows(formats.Q4_K, wantQ, q, 1); err != nil {
		t.Fatal(err)
	}
	h := make([]byte, 2*len(src))
	quant.F32ToF16Row(h, src)
	m.add("h.weight", formats.F16, []int64{2, 1024}, h)
	wantH := make([]float32, len(src))
	quant.F16ToF32Row(wantH, h)

	p, err := convrot.NewLayer(formats.Tensor{Name: "lin.weight", Type: formats.F32, Shape: []int64{8, 256}}, convrot.Options{Type: convrot.Int8Convrot, GroupSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	lin := randFloats(8*256, 2)
	codes, scales, err := p.Encode(append([]float32(nil), lin...))
	if err != nil {
		t.Fatal(err)
	}
	m.add("lin.weight", formats.I8, []int64{8, 256}, codes)
	m.add("lin.weight_scale", formats.F32, []int64{8, 1}, scales)
	m.add("lin.comfy_quant", formats.U8, []int64{int64(len(p.MarkerData))}, p.MarkerData)
	m.add("f6", formats.F6_E2M3, []int64{4}, make([]byte, 3))

	d, err := NewView(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Sources) != 4 || !slices.Equal(d.Aux, []string{"lin.weight_scale", "lin.comfy_quant"}) {
		t.Fatalf("%d sources, aux %v", len(d.Sources), d.Aux)
	}
	qs, _ := d.Lookup("q.weight")
	checkRanges(t, qs, wantQ)
	hs, _ := d.Lookup("h.weight")
	checkRanges(t, hs, wantH)

	ls, _ := d.Lookup("lin.weight")
	if ls.Module == nil || ls.TypeName() != "int8_convrot" || !ls.Quantized() {
		t.Fatalf("lin.weight: module %v, type %s", ls.Module, ls.TypeName())
	}
	dec, err := newModuleDecoder(m, *ls.Module)
	if err != nil {
		t.Fatal(err)
	}
	wantL := make([]float32, len(lin))
	if err := dec.decode(wantL, 0, codes); err != nil {
		t.Fatal(err)
	}
	checkRanges(t, ls, wantL)
	// The decode is close to the original weights (INT8 with rotation).
	var num, den float64
	for i := range lin {
		num += float64(lin[i]-wantL[i]) * float64(lin[i]-wantL[i])
		den += float64(lin[i]) * float64(lin[i])
	}
	if math.Sqrt(num/den) > 0.02 {
		t.Errorf("int8_convrot decode error %v", math.Sqrt(num/den))
	}
	f6, _ := d.Lookup("f6")
	if f6.Err() == nil || f6.Read(make([]float32, 4), 0, &Scratch{}) == nil {
		t.Error("f6 tensor reads without an error")
	}
}

// TestOrigShape checks that a valid comfy.gguf.orig_shape becomes the
// logical shape and an inconsistent one is ignored.
func TestOrigShape(t *testing.T) {
	m := newMemModel()
	m.add("a", formats.F16, []int64{9, 256}, make([]byte, 2*9*256))
	m.add("b", formats.F16, []int64{9, 256}, make([]byte, 2*9*256))
	arr := func(v ...int32) formats.Array { return formats.Array{Elem: formats.TypeInt32, Values: v} }
	m.Meta = formats.Metadata{
		{Key: gguf.OrigShapePrefix + "a", Type: formats.TypeArray, Value: arr(16, 16, 3, 3)},
		{Key: gguf.OrigShapePrefix + "b", Type: formats.TypeArray, Value: arr(16, 16, 3, 4)},
	}
	d, err := NewView(m)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.Lookup("a")
	b, _ := d.Lookup("b")
	if !slices.Equal(a.Shape(), []int64{16, 16, 3, 3}) || !slices.Equal(b.Shape(), []int64{9, 256}) {
		t.Errorf("shapes %v and %v", a.Shape(), b.Shape())
	}
}
