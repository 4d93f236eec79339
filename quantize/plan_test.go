package quantize

import (
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// TestPlanTypes checks which type each tensor gets for several mixes,
// rules and architectures on synthetic models with real names and shapes.
func TestPlanTypes(t *testing.T) {
	flux := synthModel(t, fluxSpec)
	sdxl := synthModel(t, sdxlSpec)
	wan := synthModel(t, wanSpec)
	const (
		qkv    = "double_blocks.0.img_attn.qkv.weight"
		txtQKV = "double_blocks.0.txt_attn.qkv.weight"
		proj   = "double_blocks.0.img_attn.proj.weight"
		mlp2   = "double_blocks.0.img_mlp.2.weight"
		lin2   = "single_blocks.0.linear2.weight"
		imgIn  = "img_in.weight"
		final  = "final_layer.linear.weight"
		unet   = "model.diffusion_model.input_blocks.4.1.transformer_blocks.0."
	)
	cases := []struct {
		name  string
		m     *memModel
		opts  Options
		wants map[string]formats.DType
	}{
		{"flux Q4_K_M", flux, Options{Type: "Q4_K_M"}, map[string]formats.DType{
			qkv: formats.Q5_K, proj: formats.Q4_K, mlp2: formats.Q4_K, lin2: formats.Q4_K,
			imgIn: formats.BF16, final: formats.BF16, "double_blocks.0.img_attn.norm.query_norm.scale": formats.F32,
			"double_blocks.0.img_attn.qkv.bias": formats.F32}},
		{"flux Q4_K alias", flux, Options{Type: "Q4_K"}, map[string]formats.DType{qkv: formats.Q5_K, proj: formats.Q4_K}},
		{"flux q4_K plain type", flux, Options{Type: "q4_K"}, map[string]formats.DType{qkv: formats.Q4_K, proj: formats.Q4_K}},
		{"flux Q4_K_M pure", flux, Options{Type: "Q4_K_M", Pure: true}, map[string]formats.DType{qkv: formats.Q4_K, imgIn: formats.BF16}},
		{"flux Q5_K_M", flux, Options{Type: "q5_k_m"}, map[string]formats.DType{qkv: formats.Q6_K, proj: formats.Q5_K}},
		{"flux Q3_K_L", flux, Options{Type: "Q3_K_L"}, map[string]formats.DType{qkv: formats.Q4_K, proj: formats.Q3_K}},
		{"flux Q8_0", flux, Options{Type: "Q8_0"}, map[string]formats.DType{qkv: formats.Q8_0, lin2: formats.Q8_0, final: formats.BF16}},
		{"flux F16", flux, Options{Type: "F16"}, map[string]formats.DType{qkv: formats.F16, final: formats.BF16}},
		{"flux llama rules: last match wins", flux, Options{Type: "Q4_K_M", TensorTypes: []string{"attn=q8_0", "img_attn=q6_K", "final_layer=q8_0"}},
			map[string]formats.DType{qkv: formats.Q6_K, txtQKV: formats.Q8_0, proj: formats.Q6_K, final: formats.BF16, mlp2: formats.Q4_K}},
		{"flux sd.cpp rules: first match wins", flux, Options{Type: "Q4_K_M", TensorTypeRules: "attn=q8_0,img_attn=q6_K"},
			map[string]formats.DType{qkv: formats.Q8_0, txtQKV: formats.Q8_0, mlp2: formats.Q4_K}},
		{"flux sd.cpp rules, other order", flux, Options{Type: "Q4_K_M", TensorTypeRules: "img_attn=q6_K,attn=q8_0"},
			map[string]formats.DType{qkv: formats.Q6_K, txtQKV: formats.Q8_0}},
		{"sdxl Q4_K_M row fallbacks", sdxl, Options{Type: "Q4_K_M"}, map[string]formats.DType{
			unet + "attn1.to_q.weight":                                  formats.Q5_0, // 128 wide: q4_K -> q5_0
			unet + "attn1.to_v.weight":                                  formats.Q8_0, // V projection q6_K -> q8_0
			unet + "ff.net.2.weight":                                    formats.Q6_K, // 512 wide: FFN down q6_K fits
			unet + "attn2.to_k.weight":                                  formats.Q4_K,
			"model.diffusion_model.input_blocks.0.0.weight":             formats.F16,
			"model.diffusion_model.label_emb.0.0.weight":                formats.F16,
			"model.diffusion_model.input_blocks.1.0.in_layers.2.weight": formats.F16}},
		{"sdxl Q4_K_M reshape-conv", sdxl, Options{Type: "Q4_K_M", ReshapeConv: true}, map[string]formats.DType{
			"model.diffusion_model.input_blocks.1.0.in_layers.2.weight": formats.Q4_K,
			"model.diffusion_model.input_blocks.0.0.weight":             formats.F16}},
		{"wan Q4_K_M", wan, Options{Type: "Q4_K_M"}, map[string]formats.DType{
			"blocks.0.self_attn.v.weight": formats.Q6_K, "blocks.0.ffn.2.weight": formats.Q6_K,
			"blocks.0.self_attn.q.weight": formats.Q4_K, "blocks.0.cross_attn.v.weight": formats.Q6_K,
			"blocks.0.modulation": formats.F32, "head.head.weight": formats.BF16, "patch_embedding.weight": formats.BF16}},
		{"wan Q4_0", wan, Options{Type: "Q4_0"}, map[string]formats.DType{"blocks.0.ffn.2.weight": formats.Q4_1, "blocks.0.self_attn.q.weight": formats.Q4_0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := plan(t, c.m, c.opts)
			for name, want := range c.wants {
				if row := rowOf(t, r, name); row.To != want {
					t.Errorf("%s: %s (%s), want %s", name, row.To, row.Reason, want)
				}
			}
		})
	}
}

// TestPlanShapes checks that every dim is kept (no trimming), that >4-D
// tensors are folded and --reshape-conv tensors reshaped with their torch
// shape recorded in comfy.gguf.orig_shape, and that fallbacks are explained.
func TestPlanShapes(t *testing.T) {
	r := plan(t, synthModel(t, wanSpec), Options{Type: "Q4_K_M"})
	if row := rowOf(t, r, "blocks.0.modulation"); !slices.Equal(row.Shape, []int64{1, 6, 256}) {
		t.Errorf("modulation shape %v, want [1 6 256] (no trimming)", row.Shape)
	}
	pe := rowOf(t, r, "patch_embedding.weight")
	if !slices.Equal(pe.Shape, []int64{4096, 1, 2, 2}) || !slices.Equal(pe.SourceShape, []int64{256, 16, 1, 2, 2}) || !pe.Reshaped {
		t.Errorf("patch_embedding: %v from %v, want [4096 1 2 2] from [256 16 1 2 2]", pe.Shape, pe.SourceShape)
	}
	origShape(t, r, "patch_embedding.weight", []int32{256, 16, 1, 2, 2})
	if sd := consumer(r, TargetSDCpp); !sd.OK {
		// The fold is the layout sd.cpp's own convert writes (ne[3] = out·in).
		t.Errorf("sd.cpp reported unable to load a Wan file whose only change is the 5-D fold: %v", sd.Problems)
	}
	if _, ok := r.Header.Metadata.Get(gguf.OrigShapePrefix + "blocks.0.self_attn.q.weight"); ok {
		t.Error("orig_shape written for a tensor that kept its shape")
	}

	rs := plan(t, synthModel(t, sdxlSpec), Options{Type: "Q4_K_M", ReshapeConv: true})
	conv := rowOf(t, rs, "model.diffusion_model.input_blocks.1.0.in_layers.2.weight")
	if !slices.Equal(conv.Shape, []int64{144, 256}) {
		t.Errorf("reshaped conv shape %v, want [144 256]", conv.Shape)
	}
	origShape(t, rs, "model.diffusion_model.input_blocks.1.0.in_layers.2.weight", []int32{64, 64, 3, 3})
	if sd := consumer(rs, TargetSDCpp); sd.OK {
		t.Error("sd.cpp reported able to load reshaped conv kernels")
	}

	fb := rowOf(t, plan(t, synthModel(t, sdxlSpec), Options{Type: "Q4_K_M"}), "model.diffusion_model.input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight")
	if !strings.Contains(fb.Reason, "closest type that fits") {
		t.Errorf("fallback reason %q does not explain the row-size fallback", fb.Reason)
	}
}

func origShape(t *testing.T, r *planned, name string, want []int32) {
	t.Helper()
	kv, ok := r.Header.Metadata.Get(gguf.OrigShapePrefix + name)
	if !ok {
		t.Fatalf("no %s%s", gguf.OrigShapePrefix, name)
	}
	a, ok := kv.Value.(formats.Array)
	if !ok || kv.Type != formats.TypeArray || a.Elem != formats.TypeInt32 || !slices.Equal(a.Values.([]int32), want) {
		t.Errorf("orig_shape of %s = %v (%s), want ARRAY of INT32 %v", name, kv.Value, kv.Type, want)
	}
}

func consumer(r *planned, name string) Consumer {
	for _, c := range r.Consumers {
		if c.Name == name {
			return c
		}
	}
	return Consumer{}
}

// TestPlanMetadata checks the automatic keys, --metadata and the none preset.
func TestPlanMetadata(t *testing.T) {
	r := plan(t, synthModel(t, fluxSpec), Options{Type: "Q5_K_S", Metadata: []string{"general.name=test", "general.license=mit"}})
	if r.Header.Metadata[0].Key != "general.architecture" || r.Header.Metadata[0].Value != "flux" {
		t.Errorf("first key %+v, want general.architecture = flux", r.Header.Metadata[0])
	}
	want := map[string]any{"general.file_type": uint32(16), "general.quantization_version": uint32(2), "general.name": "test", "general.license": "mit"}
	for k, v := range want {
		if kv, ok := r.Header.Metadata.Get(k); !ok || kv.Value != v {
			t.Errorf("%s = %v, want %v", k, kv.Value, v)
		}
	}
	none := plan(t, synthModel(t, fluxSpec), Options{Type: "Q5_K_S", MetadataPreset: "none", Metadata: []string{"general.name=x"}})
	if len(none.Header.Metadata) != 1 || none.Header.Metadata[0].Key != "general.name" {
		t.Errorf("preset none wrote %v", none.Header.Metadata)
	}
	// No ComfyUI-GGUF name for the architecture: no general.architecture, and a warning.
	m := &memModel{path: "x.safetensors", tensors: []formats.Tensor{{Name: "a.weight", Type: formats.F16, Shape: []int64{256, 256}, Size: 256 * 256 * 2}}}
	u := plan(t, m, Options{Type: "Q8_0"})
	if _, ok := u.Header.Metadata.Get("general.architecture"); ok {
		t.Error("general.architecture written for an unknown architecture")
	}
	if !strings.Contains(strings.Join(u.Warnings, "\n"), "general.architecture") {
		t.Errorf("no warning about general.architecture: %q", u.Warnings)
	}
	// A u8 tensor has no GGUF type: left out with a warning.
	m.tensors = append(m.tensors, formats.Tensor{Name: "mask", Type: formats.U8, Shape: []int64{4}, Size: 4})
	if u8 := plan(t, m, Options{Type: "Q8_0"}); len(u8.rows()) != 1 || !strings.Contains(strings.Join(u8.Warnings, "\n"), "no GGUF type") {
		t.Errorf("u8 tensor: %d rows, warnings %q", len(u8.rows()), u8.Warnings)
	}
	if c := consumer(u, TargetComfyUI); len(c.Notes) == 0 {
		t.Error("ComfyUI-GGUF compatibility mode not noted")
	}
}

// TestPlanConsumers checks the --target report and --strict.
func TestPlanConsumers(t *testing.T) {
	flux := synthModel(t, fluxSpec)
	r := plan(t, flux, Options{Type: "tq2_0"})
	if c := consumer(r, TargetComfyUI); c.OK || !strings.Contains(strings.Join(c.Problems, ";"), "tq2_0") {
		t.Errorf("ComfyUI-GGUF with tq2_0: %+v", c)
	}
	if c := consumer(r, TargetSDCpp); !c.OK {
		t.Errorf("sd.cpp with tq2_0: %+v", c)
	}
	_, _, err := PlanModel(&Options{Type: "tq2_0", Output: "o.gguf", Targets: []string{"comfyui"}, Strict: true}, flux)
	if err == nil || !strings.Contains(err.Error(), "Strict: ") {
		t.Errorf("--strict --target comfyui with tq2_0: %v", err)
	}
	if _, _, err := PlanModel(&Options{Type: "tq2_0", Output: "o.gguf", Targets: []string{"sdcpp,ggml"}, Strict: true}, flux); err != nil {
		t.Errorf("--strict --target sdcpp,ggml with tq2_0: %v", err)
	}
	long := &memModel{path: "l.safetensors", tensors: []formats.Tensor{{Name: strings.Repeat("x", 100) + ".weight", Type: formats.F16, Shape: []int64{32, 32}, Size: 2048}}}
	lr := plan(t, long, Options{Type: "Q8_0"})
	if consumer(lr, TargetGGML).OK || !consumer(lr, TargetSDCpp).OK || !consumer(lr, TargetComfyUI).OK {
		t.Errorf("107-byte name: %+v", lr.Consumers)
	}
	if got, err := ParseTargets([]string{"comfyui", "sdcpp"}); err != nil || !slices.Equal(got, []string{"sdcpp", "comfyui"}) {
		t.Errorf("ParseTargets = %v, %v", got, err)
	}
	if _, err := ParseTargets([]string{"llama"}); err == nil {
		t.Error("unknown target accepted")
	}
}

// TestPlanErrors checks option errors found before anything is read.
func TestPlanErrors(t *testing.T) {
	flux := synthModel(t, fluxSpec)
	cases := []struct {
		opts Options
		want string
	}{
		{Options{Type: "Q4_K_M", Output: "o.safetensors"}, "must end in .gguf"},
		{Options{Type: "int8_convrot", Output: "o.gguf"}, "must end in .safetensors"},
		{Options{Type: "Q9_K", Output: "o.gguf"}, `unknown type "Q9_K" (did you mean`},
		{Options{Type: "Q4_K_M", Output: "o.gguf", TensorTypes: []string{"a=q8_0"}, TensorTypeRules: "b=q8_0"}, "cannot be combined"},
		{Options{Type: "Q4_K_M", Output: "o.gguf", TensorTypes: []string{"noequals"}}, "want REGEX=TYPE"},
		{Options{Type: "Q4_K_M", Output: "o.gguf", TensorTypes: []string{"(?=x)=q8_0"}}, "lookahead"},
		{Options{Type: "Q4_K_M", Output: "o.gguf", TensorTypes: []string{"x=q8_K"}}, "cannot be written"},
		{Options{Type: "Q4_K_M", Output: "o.gguf", Metadata: []string{"k"}}, "want KEY=VALUE"},
		{Options{Type: "Q4_K_M", Output: "o.gguf", MetadataPreset: "all"}, "MetadataPreset"},
		{Options{Type: "int8", Output: "o.safetensors", Pure: true}, "applies to GGUF types"},
		{Options{Type: "int8", Output: "o.safetensors", TensorTypes: []string{"x=q4_K"}}, "a ComfyUI output takes"},
		{Options{Type: "int8", Output: "o.safetensors", TensorTypeRules: "x=keep", TensorTypes: []string{"y=int8"}}, "cannot be combined"},
		{Options{Type: "Q4_K_M", Output: "o.gguf", ReshapeConv: true}, "sd1/sd2/sdxl"},
		{Options{Type: "iq2_xxs", Output: "o.gguf"}, "iq2_xxs"},
	}
	for _, c := range cases {
		_, _, err := PlanModel(&c.opts, flux)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.opts, err, c.want)
		}
	}
}
