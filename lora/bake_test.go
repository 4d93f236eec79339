package lora

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// bakeFixture is a Flux-named base of three weights (F16, a Q8_0 block
// type, F32) and one untouched tensor, with a kohya LoRA on the three and
// the float64 reference of every baked tensor.
func bakeFixture(t *testing.T, strength float64) (*memModel, *Plan, map[string][]float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 9))
	base := newMem("base.safetensors")
	ad := newMem("style.safetensors")
	type layer struct {
		base, module string
		dt           formats.DType
		out, in, r   int
		alpha        float32
	}
	layers := []layer{
		{"double_blocks.0.img_attn.proj.weight", "lora_unet_double_blocks_0_img_attn_proj", formats.F16, 24, 20, 4, 2},
		{"double_blocks.0.img_mlp.0.weight", "lora_unet_double_blocks_0_img_mlp_0", formats.Q8_0, 6, 64, 3, 3},
		{"double_blocks.0.txt_attn.proj.weight", "lora_unet_double_blocks_0_txt_attn_proj", formats.F32, 5, 7, 2, 1},
	}
	want := map[string][]float64{}
	for _, l := range layers {
		w := randn(r, l.out*l.in, 0.5)
		if l.dt.Quantized() {
			base.add(l.base, l.dt, []int64{int64(l.out), int64(l.in)}, nil)
			q := make([]byte, base.find(l.base).Size)
			if err := quant.QuantizeRows(l.dt, q, w, l.in, nil, 1); err != nil {
				t.Fatal(err)
			}
			base.data[l.base] = q
		} else {
			base.add(l.base, l.dt, []int64{int64(l.out), int64(l.in)}, w)
		}
		// What the package sees is the stored (rounded) base.
		stored := decodeAll(t, base, l.base)
		up, down := randn(r, l.out*l.r, 1), randn(r, l.r*l.in, 1)
		ad.add(l.module+".lora_up.weight", formats.F32, []int64{int64(l.out), int64(l.r)}, up)
		ad.add(l.module+".lora_down.weight", formats.F32, []int64{int64(l.r), int64(l.in)}, down)
		ad.add(l.module+".alpha", formats.F32, nil, []float32{l.alpha})
		d := refLoRA(up, down, l.out, l.r, l.in)
		ref := make([]float64, len(d))
		for i := range d {
			ref[i] = float64(stored[i]) + strength*float64(l.alpha)/float64(l.r)*d[i]
		}
		want[l.base] = ref
	}
	base.add("double_blocks.0.img_attn.norm.key_norm.scale", formats.F32, []int64{8}, randn(r, 8, 1))
	// A Flux model has single blocks too (the family table looks for both).
	base.add("single_blocks.0.norm.key_norm.scale", formats.F32, []int64{8}, randn(r, 8, 1))
	v, prefix := DetectBase(base.Tensors())
	if v != names.Flux {
		t.Fatalf("base detected as %v", v)
	}
	b, err := NewBase(base.Tensors(), v, prefix)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Read(ad)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Match(Use{Adapter: a, Strength: strength})
	if err != nil || len(p.Unmatched) > 0 || len(p.Targets) != 3 {
		t.Fatalf("match: %v, %d unmatched, %d targets", err, len(p.Unmatched), len(p.Targets))
	}
	return base, p, want
}

// TestBakedReadsBaseplusDelta reads every tensor of a Baked model through
// package tensor, whole and in ranges that cut rows, and through
// ReadTensorAt (the bytes a copying writer takes), against a float64
// reference of base + strength·alpha/rank·up·down.
func TestBakedReadsBaseplusDelta(t *testing.T) {
	base, p, want := bakeFixture(t, 0.75)
	bk, err := Bake(base, p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tensor.NewView(bk)
	if err != nil {
		t.Fatal(err)
	}
	var s tensor.Scratch
	for _, src := range v.Sources {
		ref, changed := want[src.Name]
		if changed != bk.Computes(&src.Tensor) {
			t.Errorf("%s: Computes = %v", src.Name, !changed)
		}
		all := make([]float32, src.Elements())
		if err := src.Read(all, 0, &s); err != nil {
			t.Fatal(err)
		}
		if !changed {
			if stored := decodeAll(t, base, src.Name); !equalF32(all, stored) {
				t.Errorf("%s: an unchanged tensor reads differently", src.Name)
			}
			continue
		}
		for i := range all {
			if d := math.Abs(float64(all[i]) - ref[i]); d > 1e-5*(1+math.Abs(ref[i])) {
				t.Fatalf("%s: element %d = %v, want %v", src.Name, i, all[i], ref[i])
			}
		}
		n := int64(len(all))
		for _, rg := range [][2]int64{{0, 1}, {3, 17}, {n - 5, 5}, {1, n - 2}} {
			part := make([]float32, rg[1])
			if err := src.Read(part, rg[0], &s); err != nil {
				t.Fatal(err)
			}
			if !equalF32(part, all[rg[0]:rg[0]+rg[1]]) {
				t.Errorf("%s: elements [%d, %d) differ from the whole read", src.Name, rg[0], rg[0]+rg[1])
			}
		}
		// The bytes are the float32 sums encoded to the tensor's type.
		c, err := quant.Encoder(src.Tensor.Type)
		if err != nil {
			t.Fatal(err)
		}
		enc := make([]byte, src.Tensor.Size)
		c.Quantize(enc, all, nil)
		got := make([]byte, src.Tensor.Size)
		if err := formats.ReadFull(bk, &src.Tensor, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, enc) {
			t.Errorf("%s: ReadTensorAt bytes are not the baked values encoded as %s", src.Name, src.Tensor.Type)
		}
		rb, _ := src.Tensor.Type.RowBytes(src.Tensor.Shape[1])
		mid := make([]byte, rb+3)
		if err := formats.ReadFull(bk, &src.Tensor, mid, rb-1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mid, enc[rb-1:2*rb+2]) {
			t.Errorf("%s: bytes read across rows differ", src.Name)
		}
	}
}

// TestBakedReleasesFactors checks that reading a tensor whole frees its
// layers' factors, and that a second pass reads them again.
func TestBakedReleasesFactors(t *testing.T) {
	base, p, _ := bakeFixture(t, 1)
	bk, err := Bake(base, p)
	if err != nil {
		t.Fatal(err)
	}
	tg := p.Targets[0]
	l := tg.Changes[0].Layer
	tt, _ := formats.Find(bk, tg.Name)
	n := tt.Elements()
	first := make([]float32, n)
	if err := bk.ReadFloat32(&tt, first[:n/2], 0); err != nil {
		t.Fatal(err)
	}
	if !l.ready {
		t.Fatal("factors not loaded during the pass")
	}
	if err := bk.ReadFloat32(&tt, first[n/2:], n/2); err != nil {
		t.Fatal(err)
	}
	if l.ready || l.refs != 0 {
		t.Errorf("factors still held after the tensor was read whole (refs %d)", l.refs)
	}
	again := make([]float32, n)
	if err := bk.ReadFloat32(&tt, again, 0); err != nil {
		t.Fatal(err)
	}
	if !equalF32(first, again) {
		t.Error("a second pass reads other values")
	}
}

// TestBakeRefuses checks the tensors Bake cannot change.
func TestBakeRefuses(t *testing.T) {
	base, p, _ := bakeFixture(t, 1)
	other := newMem("other.safetensors")
	other.add("double_blocks.0.img_attn.proj.weight", formats.I32, []int64{24, 20}, nil)
	if _, err := Bake(other, p); err == nil {
		t.Error("baking into an integer tensor (and a base without the other targets) succeeded")
	}
	small := newMem("small.safetensors")
	for i, tt := range base.Tensors() {
		shape := tt.Shape
		if i == 0 {
			shape = []int64{1}
		}
		small.add(tt.Name, formats.F32, shape, nil)
	}
	if _, err := Bake(small, p); err == nil {
		t.Error("baking into a tensor of another size succeeded")
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestDetectBaseScaled checks that scaled-down models, whose widths sd.cpp's
// detection reads wrong, are still recognised by their names.
func TestDetectBaseScaled(t *testing.T) {
	for _, c := range []struct {
		spec   synth.Spec
		v      names.Version
		prefix string
	}{
		{synth.TinySD1, names.SD1, ""},
		{synth.Spec{Arch: "flux", Scale: 0.02, Depth: 1, DType: formats.F16}, names.Flux, "model.diffusion_model."},
	} {
		d, err := synth.Descriptors(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if v, p := DetectBase(d); v != c.v || p != c.prefix {
			t.Errorf("%s: DetectBase = %v %q, want %v %q", c.spec, v, p, c.v, c.prefix)
		}
	}
}
