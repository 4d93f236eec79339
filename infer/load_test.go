package infer_test

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/tensor"
)

func TestLoadConversions(t *testing.T) {
	m := &inferutil.MemModel{}
	f8 := inferutil.Ramp(64, 2)
	m.Add("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", formats.F8_E4M3, []int64{2, 32}, inferutil.Encode(t, formats.F8_E4M3, 32, f8))
	f64 := make([]byte, 8*4)
	for i := range 4 {
		binary.LittleEndian.PutUint64(f64[8*i:], math.Float64bits(float64(i)+0.25))
	}
	m.Add("model.diffusion_model.out.0.bias", formats.F64, []int64{4}, f64)
	i64 := make([]byte, 8*3)
	for i := range 3 {
		binary.LittleEndian.PutUint64(i64[8*i:], uint64(int64(i-1)))
	}
	m.Add("cond_stage_model.transformer.text_model.embeddings.position_ids", formats.I64, []int64{1, 3}, i64)
	// A ComfyUI-GGUF conv kernel stored as q8_0 rows of 288 with its torch shape in the metadata.
	conv := inferutil.Ramp(4*32*9, 0.5)
	m.Add("model.diffusion_model.input_blocks.1.0.in_layers.2.weight", formats.Q8_0, []int64{4, 288}, inferutil.Encode(t, formats.Q8_0, 288, conv))
	m.Meta = formats.Metadata{{Key: "comfy.gguf.orig_shape.model.diffusion_model.input_blocks.1.0.in_layers.2.weight",
		Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: []int32{4, 32, 3, 3}}}}
	// A q4_K linear weight stays q4_K, bytes untouched.
	lin := inferutil.Ramp(2*256, 0.1)
	q4 := inferutil.Encode(t, formats.Q4_K, 256, lin)
	m.Add("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2.weight", formats.Q4_K, []int64{2, 256}, q4)
	// Something no SD graph reads is left out.
	m.Add("model_ema.decay", formats.F32, []int64{1}, make([]byte, 4))

	specs := inferutil.PlanByName(t, m, nil)
	if _, ok := specs["model_ema.decay"]; ok {
		t.Error("model_ema.decay was planned")
	}
	sc := &tensor.Scratch{}
	check := func(name string, typ formats.DType, shape []int64) []byte {
		t.Helper()
		s, ok := specs[name]
		if !ok {
			t.Fatalf("%s not planned", name)
		}
		if s.Type != typ || !slices.Equal(s.Shape, shape) {
			t.Errorf("%s: held as %s %v, want %s %v", name, s.Type, s.Shape, typ, shape)
		}
		b, err := s.Read(sc)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := typ.Bytes(shape); int64(len(b)) != want {
			t.Fatalf("%s: %d bytes, want %d", name, len(b), want)
		}
		return b
	}
	b := check("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", formats.F16, []int64{2, 32})
	// F8 values are exactly representable in f16.
	if got, want := inferutil.Decode(t, formats.F16, b, 64), inferutil.Decode(t, formats.F8_E4M3, m.Data[m.TensorList[0].Name], 64); !slices.Equal(got, want) {
		t.Errorf("f8 -> f16 changed values: %v vs %v", got[:4], want[:4])
	}
	b = check("model.diffusion_model.out.0.bias", formats.F32, []int64{4})
	if got := inferutil.Decode(t, formats.F32, b, 4); got[3] != 3.25 {
		t.Errorf("f64 -> f32: %v", got)
	}
	b = check("cond_stage_model.transformer.text_model.embeddings.position_ids", formats.I32, []int64{1, 3})
	if v := int32(binary.LittleEndian.Uint32(b)); v != -1 {
		t.Errorf("i64 -> i32: first value %d, want -1", v)
	}
	b = check("model.diffusion_model.input_blocks.1.0.in_layers.2.weight", formats.F16, []int64{4, 32, 3, 3})
	want := inferutil.Decode(t, formats.Q8_0, m.Data["model.diffusion_model.input_blocks.1.0.in_layers.2.weight"], len(conv))
	got := inferutil.Decode(t, formats.F16, b, len(conv))
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-3 {
			t.Fatalf("orig_shape kernel [%d] = %g, want %g", i, got[i], want[i])
		}
	}
	b = check("model.diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2.weight", formats.Q4_K, []int64{2, 256})
	if !slices.Equal(b, q4) {
		t.Error("q4_K bytes changed at load")
	}
}

func TestLoadRefusesNewerTypes(t *testing.T) {
	for _, typ := range []formats.DType{formats.NVFP4, formats.Q1_0, formats.Q2_0} {
		m := &inferutil.MemModel{}
		size, _ := typ.Bytes([]int64{2, 256})
		m.Add("model.diffusion_model.time_embed.0.weight", typ, []int64{2, 256}, make([]byte, size))
		_, err := infer.SelectWeights(m, nil)
		if !errors.Is(err, infer.ErrNewerType) {
			t.Errorf("%s: err = %v, want ErrNewerType", typ, err)
		}
	}
}

func TestLoadNames(t *testing.T) {
	f := inferutil.Encode(t, formats.F32, 4, inferutil.Ramp(4, 1))
	m := &inferutil.MemModel{}
	// sd-cli convert without --convert-name keeps the component prefixes it adds (vae.,
	// diffusion_model.), and OpenCLIP becomes Hugging Face CLIP.
	m.Add("vae.decoder.conv_in.bias", formats.F32, []int64{4}, f)
	m.Add("diffusion_model.input_blocks.1.0.in_layers.2.bias", formats.F32, []int64{4}, f)
	m.Add("cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight", formats.F32, []int64{1, 4}, f)
	specs := inferutil.PlanByName(t, m, nil)
	for _, want := range []string{
		"first_stage_model.decoder.conv_in.bias",
		"model.diffusion_model.input_blocks.1.0.in_layers.2.bias",
		"cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.in_proj.weight",
	} {
		if _, ok := specs[want]; !ok {
			t.Errorf("no %s among %v", want, inferutil.Keys(specs))
		}
	}
	// A standalone VAE file.
	v := &inferutil.MemModel{}
	v.Add("decoder.conv_in.bias", formats.F32, []int64{4}, f)
	if _, ok := inferutil.PlanByName(t, v, infer.VAEPrefix)["first_stage_model.decoder.conv_in.bias"]; !ok {
		t.Error("standalone VAE names did not get first_stage_model.")
	}
}
