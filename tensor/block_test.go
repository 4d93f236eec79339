package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
)

// TestBlockModulesRead writes one layer in each of the microscaled and
// 4-bit formats as the quantize command lays it out, opens it through
// NewView, and checks that the Source has the logical shape, that any
// element range reads as the whole-tensor decode does, and that the
// decoded weight is close to the original (a wrong unswizzle, nibble order
// or rotation would not be).
func TestBlockModulesRead(t *testing.T) {
	const out, in = 144, 512 // 144 rows: the swizzled scales are padded to 256
	r := rand.New(rand.NewPCG(9, 10))
	orig := make([]float32, out*in)
	for i := range orig {
		orig[i] = float32(r.NormFloat64()) * float32(1+i%in/100)
	}
	for _, tc := range []struct {
		typ   convrot.Type
		bound float64 // relative Frobenius error
	}{{convrot.NVFP4, 0.12}, {convrot.MXFP8, 0.04}, {convrot.W4A4, 0.2}, {convrot.W4A8, 0.12}} {
		p, err := convrot.NewLayer(formats.Tensor{Name: "m.weight", Type: formats.F32, Shape: []int64{out, in}}, convrot.Options{Type: tc.typ})
		if err != nil || p.Keep {
			t.Fatalf("%v: %v %s", tc.typ, err, p.Note)
		}
		bufs, err := p.EncodeBlock(slices.Clone(orig), nil)
		if err != nil {
			t.Fatal(err)
		}
		m := newMemModel()
		for i, d := range p.Tensors()[:len(bufs)] {
			m.add(d.Name, d.Type, d.Shape, bufs[i])
		}
		m.add(p.Marker.Name, p.Marker.Type, p.Marker.Shape, p.MarkerData)
		v, err := NewView(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Sources) != 1 || len(v.Aux) != len(bufs) {
			t.Fatalf("%v: %d sources, aux %v", tc.typ, len(v.Sources), v.Aux)
		}
		s := v.Sources[0]
		if !slices.Equal(s.Shape(), []int64{out, in}) || s.TypeName() != p.Config.Format && s.TypeName() != tc.typ.String() {
			t.Fatalf("%v: source shape %v type %s", tc.typ, s.Shape(), s.TypeName())
		}
		all := make([]float32, out*in)
		if err := s.Read(all, 0, &Scratch{}); err != nil {
			t.Fatal(err)
		}
		part := make([]float32, 700)
		if err := s.Read(part, 3*in+100, &Scratch{}); err != nil || !slices.Equal(part, all[3*in+100:3*in+800]) {
			t.Fatalf("%v: a partial range reads differently (%v)", tc.typ, err)
		}
		var e, n float64
		for i := range all {
			e += float64(all[i]-orig[i]) * float64(all[i]-orig[i])
			n += float64(orig[i]) * float64(orig[i])
		}
		if rel := math.Sqrt(e / n); rel > tc.bound {
			t.Errorf("%v: relative error %.4f above %.2f", tc.typ, rel, tc.bound)
		}
		if _, ok := comfyquant.WeightType(p.Config.Format); !ok {
			t.Errorf("%v: no weight type", tc.typ)
		}
		// The dequantized view (convert --dequantize, merge, LoRA bake-in)
		// lists the weight as F32 [out, in] and drops the module's other tensors.
		dm, mods, err := Dequantized(m)
		if err != nil || mods != 1 {
			t.Fatalf("%v: Dequantized: %d modules, %v", tc.typ, mods, err)
		}
		ts := dm.Tensors()
		if len(ts) != 1 || ts[0].Type != formats.F32 || !slices.Equal(ts[0].Shape, []int64{out, in}) {
			t.Fatalf("%v: dequantized tensors %v", tc.typ, ts)
		}
		raw := make([]byte, 4*in)
		if _, err := dm.ReadTensorAt(&ts[0], raw, 4*in*5); err != nil || math.Float32frombits(binary.LittleEndian.Uint32(raw[4:])) != all[5*in+1] {
			t.Errorf("%v: dequantized row 5 reads differently (%v)", tc.typ, err)
		}
	}
}
