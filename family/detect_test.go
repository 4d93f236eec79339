package family

import (
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
)

// ts builds descriptors from name/shape pairs.
func ts(pairs ...any) []formats.Tensor {
	var out []formats.Tensor
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, formats.Tensor{Name: pairs[i].(string), Type: formats.F16, Shape: pairs[i+1].([]int64)})
	}
	return out
}

func prefixed(p string, t []formats.Tensor) []formats.Tensor {
	out := make([]formats.Tensor, len(t))
	for i, x := range t {
		x.Name = p + x.Name
		out[i] = x
	}
	return out
}

func synthTensors(t *testing.T, spec synth.Spec) []formats.Tensor {
	d, err := synth.Descriptors(spec)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type comp struct{ name, kind, variant, prefix string }

func TestDetectArchitecture(t *testing.T) {
	s := func(d ...int64) []int64 { return d }
	clipL := ts(
		"text_model.embeddings.token_embedding.weight", s(49408, 768),
		"text_model.encoder.layers.0.self_attn.q_proj.weight", s(768, 768))
	clipG := ts(
		"text_model.embeddings.token_embedding.weight", s(49408, 1280),
		"text_model.encoder.layers.0.self_attn.q_proj.weight", s(1280, 1280))
	t5 := ts(
		"encoder.block.0.layer.0.SelfAttention.q.weight", s(4096, 4096),
		"encoder.block.0.layer.1.DenseReluDense.wi_0.weight", s(10240, 4096))
	vae16 := ts(
		"decoder.conv_in.weight", s(512, 16, 3, 3),
		"decoder.up.0.block.0.conv1.weight", s(128, 256, 3, 3),
		"encoder.down.0.block.0.conv1.weight", s(128, 128, 3, 3))
	sd2UNet := ts(
		"input_blocks.1.1.proj_in.weight", s(320, 320),
		"input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", s(320, 1024),
		"middle_block.1.proj_in.weight", s(1280, 1280),
		"time_embed.0.weight", s(1280, 320))
	openClipH := ts(
		"transformer.resblocks.0.attn.in_proj_weight", s(3072, 1024),
		"token_embedding.weight", s(49408, 1024))
	sd3 := ts(
		"joint_blocks.0.context_block.attn.qkv.weight", s(4608, 1536),
		"joint_blocks.0.x_block.attn.qkv.weight", s(4608, 1536),
		"x_embedder.proj.weight", s(1536, 16, 2, 2),
		"pos_embed", s(1, 36864, 1536))
	var full []formats.Tensor
	full = append(full, prefixed("model.diffusion_model.", sd3)...)
	full = append(full, prefixed("text_encoders.clip_l.transformer.", clipL)...)
	full = append(full, prefixed("text_encoders.clip_g.transformer.", clipG)...)
	full = append(full, prefixed("text_encoders.t5xxl.transformer.", t5)...)
	full = append(full, prefixed("first_stage_model.", vae16)...)

	cases := []struct {
		name    string
		tensors []formats.Tensor
		arch    string
		comps   []comp
	}{
		{"sd1 full checkpoint", synthTensors(t, synth.Spec{Arch: "sd1"}), "sd1", []comp{
			{"sd1", KindDiffusion, "", "model.diffusion_model."},
			{"vae", KindVAE, "4ch", "first_stage_model."},
			{"clip_l", KindTextEncoder, "", "cond_stage_model.transformer."}}},
		{"tiny sd1 (narrow, still sd1 by structure)", synthTensors(t, synth.TinySD1), "sd1", []comp{
			{"sd1", KindDiffusion, "", "model.diffusion_model."},
			{"vae", KindVAE, "4ch", "first_stage_model."},
			{"clip_l", KindTextEncoder, "", "cond_stage_model.transformer."}}},
		{"sdxl base checkpoint", synthTensors(t, synth.Spec{Arch: "sdxl"}), "sdxl", []comp{
			{"sdxl", KindDiffusion, "", "model.diffusion_model."},
			{"vae", KindVAE, "4ch", "first_stage_model."},
			{"clip_l", KindTextEncoder, "", "conditioner.embedders.0.transformer."},
			{"clip_g", KindTextEncoder, "open_clip", "conditioner.embedders.1.model."}}},
		{"sdxl refiner", ts(
			"model.diffusion_model.label_emb.0.0.weight", s(1536, 2560),
			"model.diffusion_model.input_blocks.4.1.transformer_blocks.0.attn2.to_k.weight", s(768, 1280)), "sdxl", []comp{
			{"sdxl", KindDiffusion, "refiner", "model.diffusion_model."}}},
		{"flux dev, no prefix", synthTensors(t, synth.Spec{Arch: "flux"}), "flux", []comp{
			{"flux", KindDiffusion, "dev", ""}}},
		{"flux dev under sd.cpp's prefix", prefixed("model.diffusion_model.", synthTensors(t, synth.Spec{Arch: "flux", Scale: 1.0 / 32, Depth: 1})), "flux", []comp{
			{"flux", KindDiffusion, "dev", "model.diffusion_model."}}},
		{"flux schnell", ts("double_blocks.0.img_attn.qkv.weight", s(9216, 3072), "single_blocks.0.linear1.weight", s(21504, 3072)), "flux", []comp{
			{"flux", KindDiffusion, "schnell", ""}}},
		{"flux diffusers", ts("transformer_blocks.0.attn.add_q_proj.weight", s(3072, 3072), "single_transformer_blocks.0.proj_out.weight", s(3072, 15360)), "flux", []comp{
			{"flux", KindDiffusion, "diffusers", ""}}},
		{"wan t2v", synthTensors(t, synth.Spec{Arch: "wan"}), "wan", []comp{{"wan", KindDiffusion, "t2v", ""}}},
		{"wan i2v", ts("blocks.0.self_attn.q.weight", s(5120, 5120), "patch_embedding.weight", s(5120, 36, 1, 2, 2), "img_emb.proj.1.weight", s(1280, 1280)), "wan", []comp{
			{"wan", KindDiffusion, "i2v", ""}}},
		{"wan without a 5-D patch embedding is not wan", ts("blocks.0.self_attn.q.weight", s(5120, 5120), "patch_embedding.weight", s(5120, 64)), "unknown", nil},
		{"sd2 checkpoint", append(prefixed("model.diffusion_model.", sd2UNet), prefixed("cond_stage_model.model.", openClipH)...), "sd2", []comp{
			{"sd2", KindDiffusion, "", "model.diffusion_model."},
			{"clip_h", KindTextEncoder, "open_clip", "cond_stage_model.model."}}},
		{"sd3 ComfyUI checkpoint", full, "sd3", []comp{
			{"sd3", KindDiffusion, "medium", "model.diffusion_model."},
			{"clip_l", KindTextEncoder, "", "text_encoders.clip_l.transformer."},
			{"clip_g", KindTextEncoder, "", "text_encoders.clip_g.transformer."},
			{"t5xxl", KindTextEncoder, "", "text_encoders.t5xxl.transformer."},
			{"flux_vae", KindVAE, "16ch", "first_stage_model."}}},
		{"sd.cpp component prefixes", append(prefixed("vae.", vae16), prefixed("text_encoders.clip_l.transformer.", clipL)...), "unknown", []comp{
			{"flux_vae", KindVAE, "16ch", "vae."},
			{"clip_l", KindTextEncoder, "", "text_encoders.clip_l.transformer."}}},
		{"qwen-image", ts("transformer_blocks.0.img_mod.1.weight", s(18432, 3072), "transformer_blocks.0.txt_mod.1.weight", s(18432, 3072),
			"img_in.weight", s(3072, 64)), "qwen_image", []comp{{"qwen_image", KindDiffusion, "", ""}}},
		{"z-image", ts("noise_refiner.0.attention.qkv.weight", s(11520, 3840), "context_refiner.0.attention.qkv.weight", s(11520, 3840),
			"layers.0.attention.qkv.weight", s(11520, 3840), "x_pad_token", s(1, 3840)), "z_image", []comp{{"z_image", KindDiffusion, "", ""}}},
		{"diffusers sdxl unet", ts("add_embedding.linear_1.weight", s(1280, 2816),
			"down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight", s(640, 2048)), "sdxl", []comp{{"sdxl", KindDiffusion, "diffusers", ""}}},
		{"diffusers sd1 unet", ts("down_blocks.0.attentions.0.proj_in.weight", s(320, 320, 1, 1),
			"down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight", s(320, 768)), "sd1", []comp{{"sd1", KindDiffusion, "diffusers", ""}}},
		{"standalone clip_l", clipL, "clip_l", []comp{{"clip_l", KindTextEncoder, "", ""}}},
		{"standalone t5xxl", t5, "t5xxl", []comp{{"t5xxl", KindTextEncoder, "", ""}}},
		{"umt5 (wan)", append(ts("shared.weight", s(256384, 4096)), t5...), "umt5xxl", []comp{{"umt5xxl", KindTextEncoder, "", ""}}},
		{"qwen3 text encoder", ts("model.embed_tokens.weight", s(151936, 2560), "model.layers.0.self_attn.q_proj.weight", s(4096, 2560),
			"model.layers.0.self_attn.q_norm.weight", s(128)), "qwen3", []comp{{"qwen3", KindTextEncoder, "", ""}}},
		{"qwen2.5-vl under text_encoders.llm.", prefixed("text_encoders.llm.", ts("model.embed_tokens.weight", s(152064, 3584),
			"model.layers.0.self_attn.q_proj.weight", s(3584, 3584))), "qwen2.5vl", []comp{{"qwen2.5vl", KindTextEncoder, "", "text_encoders.llm."}}},
		{"flux vae alone", vae16, "flux_vae", []comp{{"flux_vae", KindVAE, "16ch", ""}}},
		{"wan vae", ts("encoder.downsamples.0.residual.0.gamma", s(96, 1, 1, 1), "decoder.upsamples.0.residual.2.weight", s(384, 384, 3, 3, 3)), "wan_vae", []comp{
			{"wan_vae", KindVAE, "", ""}}},
		{"narrow clip named by its prefix", prefixed("text_encoders.clip_g.transformer.", ts("text_model.encoder.layers.0.mlp.fc1.weight", s(256, 64))), "clip_g", []comp{
			{"clip_g", KindTextEncoder, "", "text_encoders.clip_g.transformer."}}},
		{"narrow clip without a hint", ts("text_model.encoder.layers.0.mlp.fc1.weight", s(256, 64)), "clip", []comp{
			{"clip", KindTextEncoder, "", ""}}},
		{"synth t5xxl", synthTensors(t, synth.Spec{Arch: "t5xxl"}), "t5xxl", []comp{{"t5xxl", KindTextEncoder, "", ""}}},
		{"synth clip_l", synthTensors(t, synth.Spec{Arch: "clip_l"}), "clip_l", []comp{{"clip_l", KindTextEncoder, "", ""}}},
		{"synth vae", synthTensors(t, synth.Spec{Arch: "vae"}), "vae", []comp{{"vae", KindVAE, "4ch", ""}}},
		{"synth sd1 unet", synthTensors(t, synth.Spec{Arch: "sd1_unet"}), "sd1", []comp{{"sd1", KindDiffusion, "", ""}}},
		{"unknown", ts("foo.weight", s(3, 3), "bar.bias", s(3)), "unknown", nil},
	}
	for _, c := range cases {
		a := Detect(c.tensors, nil)
		if a.Name != c.arch {
			t.Errorf("%s: architecture %q, want %q", c.name, a.Name, c.arch)
		}
		var got []comp
		for _, x := range a.Components {
			got = append(got, comp{x.Name, x.Kind, x.Variant, x.Prefix})
		}
		if len(got) != len(c.comps) {
			t.Errorf("%s: components %v, want %v", c.name, got, c.comps)
			continue
		}
		for i := range got {
			if got[i] != c.comps[i] {
				t.Errorf("%s: component %d = %v, want %v", c.name, i, got[i], c.comps[i])
			}
		}
	}
}

func TestDetectCountsAndUnassigned(t *testing.T) {
	tensors := synthTensors(t, synth.Spec{Arch: "sd1"})
	tensors = append(tensors, formats.Tensor{Name: "alphas_cumprod", Type: formats.F32, Shape: []int64{1000}, Size: 4000})
	a := Detect(tensors, nil)
	if a.Unassigned != 1 {
		t.Errorf("unassigned = %d, want 1", a.Unassigned)
	}
	want := map[string]int64{"sd1": 859_520_964, "vae": 83_653_863, "clip_l": 123_060_480 + 77}
	for _, c := range a.Components {
		if c.Params != want[c.Name] {
			t.Errorf("%s: %d params, want %d", c.Name, c.Params, want[c.Name])
		}
	}
}

// Every row of the table is reachable: each one wins on some input built
// from its own conditions, so no row is shadowed by a more general one.
func TestEveryRuleCanWin(t *testing.T) {
	for i, r := range rules {
		var tensors []formats.Tensor
		ok := true
		words := ""
		for _, c := range r.conds {
			if c.meta != "" {
				words += c.meta + "\n"
				continue
			}
			if c.absent {
				continue
			}
			name, found := sampleName(c.re.String())
			if !found {
				ok = false
				break
			}
			shape := []int64{64, 64}
			if c.ndim > 0 {
				shape = make([]int64, c.ndim)
				for k := range shape {
					shape[k] = 3
				}
			}
			for k, d := range c.dims {
				if d >= 0 {
					shape[k] = d
				}
			}
			tensors = append(tensors, formats.Tensor{Name: name, Type: formats.F16, Shape: shape})
		}
		if !ok {
			t.Errorf("rule %d (%s %s): no sample name for its regexps", i, r.name, r.variant)
			continue
		}
		g := &group{}
		for k := range tensors {
			g.tensors = append(g.tensors, &tensors[k])
		}
		won := false
		for _, w := range detectGroup(g, words) {
			if w == &rules[i] || (w.name == r.name && w.variant == r.variant) {
				won = true
			}
		}
		if !won {
			t.Errorf("rule %d (%s %q %v) never wins on its own sample", i, r.name, r.variant, names(tensors))
		}
	}
}

func names(t []formats.Tensor) []string {
	var out []string
	for _, x := range t {
		out = append(out, x.Name)
	}
	return out
}

// sampleName turns one of the table's regexps into a name it matches, by
// choosing the first alternative and simple instances of classes.
func sampleName(re string) (string, bool) {
	r := []rune(re)
	var b []rune
	for i := 0; i < len(r); i++ {
		switch c := r[i]; c {
		case '^', '$':
		case '\\':
			i++
			switch r[i] {
			case 'd':
				b = append(b, '0')
			default:
				b = append(b, r[i])
			}
		case '+', '*', '?':
			if c == '?' && len(b) > 0 && r[i-1] == ')' {
				continue // optional group: kept once
			}
		case '(':
			// First alternative of the group up to '|' or ')'.
			depth, j := 0, i+1
			end := -1
			alt := -1
			for ; j < len(r); j++ {
				if r[j] == '(' {
					depth++
				} else if r[j] == ')' {
					if depth == 0 {
						end = j
						break
					}
					depth--
				} else if r[j] == '|' && depth == 0 && alt < 0 {
					alt = j
				}
			}
			if end < 0 {
				return "", false
			}
			stop := end
			if alt >= 0 {
				stop = alt
			}
			inner, ok := sampleName(string(r[i+1 : stop]))
			if !ok {
				return "", false
			}
			b = append(b, []rune(inner)...)
			i = end
			if i+1 < len(r) && r[i+1] == '?' {
				i++
			}
		case '[':
			j := i + 1
			for j < len(r) && r[j] != ']' {
				j++
			}
			b = append(b, r[i+1])
			i = j
		case '.':
			b = append(b, 'x')
		default:
			b = append(b, c)
		}
	}
	return string(b), true
}

func BenchmarkDetectSDXL(b *testing.B) {
	d, _ := synth.Descriptors(synth.Spec{Arch: "sdxl"})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Detect(d, nil)
	}
}

// TestDetectOrigShape: a GGUF stores Wan's 5-D patch embedding folded to
// 4-D with comfy.gguf.orig_shape; detection must see the recorded shape
// (TI2V-5B is told by its 48 input channels, which the folded shape
// hides), ignore a key whose shape does not hold the tensor's elements,
// and still know a folded kernel without the key as Wan (sd.cpp's own
// GGUF files fold it so).
func TestDetectOrigShape(t *testing.T) {
	s := func(d ...int64) []int64 { return d }
	folded := ts("blocks.0.self_attn.q.weight", s(256, 256), "blocks.0.cross_attn.norm_k.weight", s(256), "patch_embedding.weight", s(256*48, 1, 2, 2))
	orig := func(dims ...int32) formats.Metadata {
		return formats.Metadata{{Key: "comfy.gguf.orig_shape.patch_embedding.weight", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: dims}}}
	}
	for _, c := range []struct {
		why           string
		md            formats.Metadata
		name, variant string
	}{
		{"no key", nil, "wan", "t2v"},
		{"orig_shape 5-D", orig(256, 48, 1, 2, 2), "wan", "ti2v-5b"},
		{"orig_shape with other elements", orig(256, 48, 1, 2, 4), "wan", "t2v"},
	} {
		a := Detect(folded, c.md)
		if a.Name != c.name || a.Variant() != c.variant {
			t.Errorf("%s: %s %q, want %s %q", c.why, a.Name, a.Variant(), c.name, c.variant)
		}
	}
	if len(folded[2].Shape) != 4 {
		t.Errorf("Detect changed its input's shape to %v", folded[2].Shape)
	}
}
