package convrot

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func TestParseType(t *testing.T) {
	for _, typ := range Types() {
		got, err := ParseType(typ.String())
		if err != nil || got != typ {
			t.Errorf("ParseType(%q) = %v, %v", typ.String(), got, err)
		}
	}
	if got, err := ParseType("INT8_CONVROT"); err != nil || got != Int8Convrot {
		t.Errorf("ParseType(INT8_CONVROT) = %v, %v", got, err)
	}
	if _, err := ParseType("q8_0"); err == nil {
		t.Error("ParseType(q8_0) succeeded")
	}
}

func TestNewLayer(t *testing.T) {
	w := formats.Tensor{Name: "double_blocks.0.img_attn.qkv.weight", Type: formats.BF16, Shape: []int64{9216, 3072}}
	type out struct {
		name  string
		typ   formats.DType
		shape []int64
		size  int64
	}
	marker256 := `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`
	for _, c := range []struct {
		opt    Options
		src    formats.Tensor
		marker string
		outs   []out
		note   string
	}{
		{Options{Type: Int8Convrot}, w, marker256, []out{
			{"double_blocks.0.img_attn.qkv.weight", formats.I8, []int64{9216, 3072}, 9216 * 3072},
			{"double_blocks.0.img_attn.qkv.weight_scale", formats.F32, []int64{9216, 1}, 9216 * 4},
			{"double_blocks.0.img_attn.qkv.comfy_quant", formats.U8, []int64{int64(len(marker256))}, int64(len(marker256))},
		}, ""},
		{Options{Type: Int8Convrot, GroupSize: 1024}, w, `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 1024}`, nil, ""},
		{Options{Type: Int8}, w, `{"format": "int8_tensorwise"}`, nil, ""},
		{Options{Type: FP8E4M3}, w, `{"format": "float8_e4m3fn"}`, []out{
			{"double_blocks.0.img_attn.qkv.weight", formats.F8_E4M3, []int64{9216, 3072}, 9216 * 3072},
			{"double_blocks.0.img_attn.qkv.weight_scale", formats.F32, []int64{}, 4},
			{"double_blocks.0.img_attn.qkv.comfy_quant", formats.U8, []int64{27}, 27},
		}, ""},
		{Options{Type: FP8E5M2, FullPrecisionMatMul: true}, w, `{"format": "float8_e5m2", "full_precision_matrix_mult": true}`, nil, ""},
		// SD 1.x attention with in=320: no group of 256 fits.
		{Options{Type: Int8Convrot}, formats.Tensor{Name: "m.to_q.weight", Type: formats.F16, Shape: []int64{320, 320}},
			`{"format": "int8_tensorwise"}`, []out{
				{"m.to_q.weight", formats.I8, []int64{320, 320}, 320 * 320},
				{"m.to_q.weight_scale", formats.F32, []int64{320, 1}, 320 * 4},
				{"m.to_q.comfy_quant", formats.U8, []int64{29}, 29},
			}, "in=320 not divisible by 256: plain int8"},
		{Options{Type: Int8Convrot, GroupSize: 64}, formats.Tensor{Name: "m.to_q.weight", Type: formats.F16, Shape: []int64{320, 320}},
			`{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`, nil, ""},
	} {
		p, err := NewLayer(c.src, c.opt)
		if err != nil {
			t.Fatalf("NewLayer(%s, %+v): %v", c.src.Name, c.opt, err)
		}
		if string(p.MarkerData) != c.marker {
			t.Errorf("%+v: marker %s, want %s", c.opt, p.MarkerData, c.marker)
		}
		if p.Note != c.note {
			t.Errorf("%+v: note %q, want %q", c.opt, p.Note, c.note)
		}
		if p.Config.Convrot != strings.Contains(c.marker, "convrot") {
			t.Errorf("%+v: Config.Convrot = %v", c.opt, p.Config.Convrot)
		}
		if c.outs == nil {
			continue
		}
		got := p.Tensors()
		if len(got) != len(c.outs) {
			t.Fatalf("%+v: %d outputs, want %d", c.opt, len(got), len(c.outs))
		}
		for i, o := range c.outs {
			g := got[i]
			if g.Name != o.name || g.Type != o.typ || !reflect.DeepEqual(g.Shape, o.shape) || g.Size != o.size {
				t.Errorf("%+v: output %d = %s %s %v (%d bytes), want %s %s %v (%d bytes)",
					c.opt, i, g.Name, g.Type, g.Shape, g.Size, o.name, o.typ, o.shape, o.size)
			}
		}
	}
}

func TestPlanModuleErrors(t *testing.T) {
	ok := formats.Tensor{Name: "a.weight", Type: formats.F32, Shape: []int64{4, 256}}
	for _, c := range []struct {
		src formats.Tensor
		opt Options
		msg string
	}{
		{formats.Tensor{Name: "a.bias", Shape: []int64{4, 256}}, Options{Type: Int8}, "not a module weight"},
		{formats.Tensor{Name: ".weight", Shape: []int64{4, 256}}, Options{Type: Int8}, "not a module weight"},
		{formats.Tensor{Name: "a.weight", Shape: []int64{256}}, Options{Type: Int8}, "2-D"},
		{formats.Tensor{Name: "a.weight", Shape: []int64{4, 4, 3, 3}}, Options{Type: Int8}, "2-D"},
		{formats.Tensor{Name: "a.weight", Shape: []int64{0, 256}}, Options{Type: Int8}, "2-D"},
		{ok, Options{Type: Int8Convrot, GroupSize: 512}, "power of two but not of four"},
		{ok, Options{Type: Int8Convrot, GroupSize: 100}, "not a power of four"},
		{ok, Options{}, "unknown convrot type"},
	} {
		_, err := NewLayer(c.src, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), c.src.Name) {
			t.Errorf("NewLayer(%s %v, %+v) = %v, want an error naming the tensor and containing %q", c.src.Name, c.src.Shape, c.opt, err, c.msg)
		}
	}
}

func TestPlanEncodeMatchesRows(t *testing.T) {
	const out, in = 8, 512
	w := gaussianWithOutliers(out, in, 9, 40)
	p, err := NewLayer(formats.Tensor{Name: "x.weight", Type: formats.F32, Shape: []int64{out, in}}, Options{Type: Int8Convrot})
	if err != nil {
		t.Fatal(err)
	}
	weight, scale, err := p.Encode(append([]float32(nil), w...))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(weight)) != p.Weight.Size || int64(len(scale)) != p.Scale.Size {
		t.Fatalf("Encode gave %d and %d bytes, plan says %d and %d", len(weight), len(scale), p.Weight.Size, p.Scale.Size)
	}
	// Streaming the rows in chunks of 3 gives the same bytes.
	q, err := p.Rows()
	if err != nil {
		t.Fatal(err)
	}
	var codes []byte
	var scales []float32
	for r := 0; r < out; r += 3 {
		n := min(3, out-r)
		chunk := append([]float32(nil), w[r*in:(r+n)*in]...)
		c, s := make([]byte, n*in), make([]float32, n)
		if err := q.Quantize(c, s, chunk); err != nil {
			t.Fatal(err)
		}
		codes, scales = append(codes, c...), append(scales, s...)
	}
	if string(codes) != string(weight) || string(PutScales(nil, scales)) != string(scale) {
		t.Error("chunked Quantize differs from Layer.Encode")
	}
	if _, _, err := p.Encode(w[:10]); err == nil {
		t.Error("Encode of a short buffer succeeded")
	}
}
