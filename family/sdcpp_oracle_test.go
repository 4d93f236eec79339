package family

import (
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// sdcppOracle is stable-diffusion.cpp's get_sd_version (src/model_loader.cpp,
// 97d2990) written out rule by rule, the independent account the family
// table's sd.cpp columns are tested against (sdcpp_test.go). It returns the
// version name as the table spells it, "" for sd.cpp's VERSION_COUNT.
// Tensors must come in sd.cpp's load order: like sd.cpp, the first marker of
// a family that returns early wins.
func sdcppOracle(tensors []formats.Tensor) string {
	var d detector
	byName := make(map[string]*formats.Tensor, len(tensors))
	for i := range tensors {
		byName[tensors[i].Name] = &tensors[i]
	}
	d.get = func(name string) *formats.Tensor { return byName[name] }
	d.has = func(name string) bool { return byName[name] != nil }
	for i := range tensors {
		if v, done := d.see(&tensors[i]); done {
			return v
		}
	}
	return d.decide()
}

// earlyMarker is a tensor whose presence settles the version at once.
type earlyMarker struct {
	substr string // the name contains this
	exact  bool   // the name must equal substr instead
	also   string // and the model must hold this exact name too
	v      string // then it is this version
}

// The early markers in sd.cpp's order.
var earlyMarkers = []earlyMarker{
	{substr: "model.diffusion_model.net.lq_proj.latent_proj.0.weight", v: "pid"},
	{substr: "embed_image_indicator.weight", v: "ideogram4"},
	{substr: "model.diffusion_model.txtfusion.projector.weight", v: "krea2"},
	{substr: "model.diffusion_model.text_fusion.projector.weight", v: "krea2"},
	{substr: "model.diffusion_model.nerf_final_layer_conv.", v: "chroma-radiance"},
	{substr: "model.diffusion_model.joint_blocks.", v: "sd3"},
	{substr: "model.x_embedder.proj1.weight", also: "model.language_model.layers.0.self_attn.q_proj.weight", v: "hidream-o1"},
	{substr: "model.diffusion_model.transformer_blocks.0.attn.norm_added_q.weight", also: "model.diffusion_model.transformer_blocks.0.img_mlp.w1.weight", v: "lens"},
	{substr: "net.img_embedder.proj1.weight", v: "minit2i"},
	{substr: "language_model.model.layers.0.self_attn.q_proj_mot_gen.weight", v: "other"},
	{substr: "model.diffusion_model.txt_in.text_norm.weight", exact: true, v: "other"},
	{substr: "model.diffusion_model.transformer_blocks.0.img_mod.1.weight", v: "qwen-image"}, // refined in see
	{substr: "model.diffusion_model.txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.weight", v: "hunyuan-video"},
	{substr: "llm_adapter.blocks.0.cross_attn.q_proj.weight", v: "anima"},
}

// Markers checked after the Flux.2 flag, again in sd.cpp's order.
var lateMarkers = []earlyMarker{
	{substr: "dual_time_embed.semantic_embedder.linear_1.weight", v: "sefi-image"},
	{substr: "model.diffusion_model.double_blocks.0.img_mlp.gate_proj.weight", v: "ovis-image"},
	{substr: "model.diffusion_model.cap_embedder.0.weight", v: "z-image"},
	{substr: "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight", v: "boogu-image"},
	{substr: "model.diffusion_model.layers.0.adaLN_sa_ln.weight", v: "ernie-image"},
	{substr: "model.diffusion_model.adaln_single.emb.timestep_embedder.linear_1.bias", v: "ltxav"},
	{substr: "model.diffusion_model.video_patch_proj.weight", also: "model.diffusion_model.audio_patch_proj.weight", v: "minimax-h3"},
}

// Names of the CLIP token embedding, whose width tells SD 1.x (768) from
// SD 2.x (1024).
var tokenEmbeddingNames = map[string]bool{
	"cond_stage_model.transformer.text_model.embeddings.token_embedding.weight":        true,
	"cond_stage_model.model.token_embedding.weight":                                    true,
	"text_model.embeddings.token_embedding.weight":                                     true,
	"te.text_model.embeddings.token_embedding.weight":                                  true,
	"conditioner.embedders.0.model.token_embedding.weight":                             true,
	"conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight": true,
}

// Names of the first convolution / patch embedding, whose input channels tell
// the inpainting and edit variants apart.
var inputBlockNames = map[string]bool{
	"model.diffusion_model.input_blocks.0.0.weight": true,
	"model.diffusion_model.img_in.weight":           true,
	"unet.conv_in.weight":                           true,
}

var contextEmbeddingNames = map[string]bool{
	"model.diffusion_model.txt_in.weight":           true,
	"model.diffusion_model.context_embedder.weight": true,
}

// detector accumulates the flags sd.cpp collects in its scan.
type detector struct {
	has func(name string) bool
	get func(name string) *formats.Tensor

	flux, flux2, single47, wan, s2v, imgEmb      bool
	patchChannels                                int64
	unet, multipleEncoders, xl                   bool
	middle1, output311, output71, attn1024       bool
	tokenEmbedding, inputBlock, contextEmbedding *formats.Tensor
}

func (m *earlyMarker) match(d *detector, name string) bool {
	if m.exact {
		if name != m.substr {
			return false
		}
	} else if !strings.Contains(name, m.substr) {
		return false
	}
	return m.also == "" || d.has(m.also)
}

func containsEither(s, a, b string) bool { return strings.Contains(s, a) || strings.Contains(s, b) }

// see looks at one tensor; done reports that the version is settled.
func (d *detector) see(t *formats.Tensor) (v string, done bool) {
	name := t.Name
	if containsEither(name, "model.diffusion_model.double_blocks.", "model.diffusion_model.single_transformer_blocks.") {
		d.flux = true
	}
	for i := range earlyMarkers {
		if earlyMarkers[i].match(d, name) {
			v := earlyMarkers[i].v
			if v == "qwen-image" && (ne(d.get("model.diffusion_model.img_in.weight"), 0) == 128 || d.has("model.diffusion_model.time_text_embed.addition_t_embedding.weight")) {
				// MAGE-Flow and Qwen-Image-Layered share the marker.
				v = "mage-flow"
				if ne(d.get("model.diffusion_model.img_in.weight"), 0) != 128 {
					v = "qwen-image-layered"
				}
			}
			return v, true
		}
	}
	if strings.Contains(name, "model.diffusion_model.double_stream_modulation_img.lin.weight") {
		d.flux2 = true
	}
	if strings.Contains(name, "single_blocks.47.linear1.weight") {
		d.single47 = true
	}
	for i := range lateMarkers {
		if lateMarkers[i].match(d, name) {
			return lateMarkers[i].v, true
		}
	}
	// Wan 2.x: the variants differ in shapes sd.cpp reads after the scan.
	if strings.Contains(name, "model.diffusion_model.blocks.0.cross_attn.norm_k.weight") {
		d.wan = true
	}
	if containsEither(name, "casual_audio_encoder.weights", "audio_injector.injector.0.q.weight") {
		d.s2v = true
	}
	if strings.Contains(name, "model.diffusion_model.patch_embedder.weight") {
		return "lingbot-video", true
	}
	if strings.Contains(name, "model.diffusion_model.patch_embedding.weight") {
		d.patchChannels = ne(t, 3)
	}
	if strings.Contains(name, "model.diffusion_model.img_emb") {
		d.imgEmb = true
	}
	if containsEither(name, "model.diffusion_model.input_blocks.", "unet.down_blocks.") {
		d.unet = true
		if d.multipleEncoders {
			d.xl = true
		}
	}
	if containsEither(name, "conditioner.embedders.1", "cond_stage_model.1") || strings.Contains(name, "te.1") {
		d.multipleEncoders = true
		if d.unet {
			d.xl = true
		}
	}
	if strings.Contains(name, "model.diffusion_model.input_blocks.8.0.time_mixer.mix_factor") {
		return "svd", true
	}
	if containsEither(name, "model.diffusion_model.middle_block.1.", "unet.mid_block.resnets.1.") {
		d.middle1 = true
	}
	if containsEither(name, "model.diffusion_model.output_blocks.3.1.transformer_blocks.1", "unet.up_blocks.1.attentions.0.transformer_blocks.1") {
		d.output311 = true
	}
	if containsEither(name, "model.diffusion_model.output_blocks.7.1", "unet.up_blocks.2.attentions.1") {
		d.output71 = true
		if strings.Contains(name, "model.diffusion_model.output_blocks.7.1.transformer_blocks.0.attn1.to_k.weight") && ne(t, 0) == 1024 {
			d.attn1024 = true
		}
	}
	if tokenEmbeddingNames[name] {
		d.tokenEmbedding = t
	}
	if inputBlockNames[name] {
		d.inputBlock = t
	}
	if contextEmbeddingNames[name] {
		d.contextEmbedding = t
	}
	return "", false
}

// decide turns the collected flags into a version, as sd.cpp does after its
// scan.
func (d *detector) decide() string {
	if d.wan {
		switch {
		case d.s2v:
			return "wan2.2-s2v"
		case d.patchChannels == 184320 && !d.imgEmb:
			return "wan2.2-i2v"
		case d.patchChannels == 147456 && !d.imgEmb:
			return "wan2.2-ti2v"
		}
		return "wan2"
	}
	inChannels := ne(d.inputBlock, 2)
	inpaint, edit := inChannels == 9, inChannels == 8
	switch {
	case d.xl:
		switch {
		case inpaint:
			return "sdxl-inpaint"
		case edit:
			return "sdxl-pix2pix"
		case !d.middle1 && !d.output311:
			return "sdxl-vega"
		case !d.middle1:
			return "sdxl-ssd1b"
		}
		return "sdxl"
	case d.flux && !d.flux2:
		if ne(d.contextEmbedding, 0) == 3584 {
			return "longcat"
		}
		switch ne(d.inputBlock, 0) {
		case 384:
			return "flux-fill"
		case 128:
			return "flux-controls"
		case 196:
			return "flex-2"
		}
		return "flux"
	case d.flux2:
		if d.single47 {
			return "flux2"
		}
		return "flux2-klein"
	}
	switch ne(d.tokenEmbedding, 0) {
	case 768:
		switch {
		case inpaint:
			return "sd1-inpaint"
		case edit:
			return "sd1-pix2pix"
		case !d.middle1 && !d.output71:
			return "sdxs-512-ds"
		case !d.middle1:
			return "sd1-tiny-unet"
		}
		return "sd1"
	case 1024:
		switch {
		case inpaint:
			return "sd2-inpaint"
		case !d.middle1 && d.attn1024:
			return "sdxs-09"
		case !d.middle1:
			return "sd2-tiny-unet"
		}
		return "sd2"
	}
	return ""
}

// ne returns ggml's ne[i] of t as sd.cpp sees it: the i-th dimension
// counted from the innermost, 1 beyond the tensor's rank and for a missing
// tensor (a default TensorStorage has all ne 1). A 5-D shape is folded as
// sd.cpp's safetensors reader folds it, the two outermost dims into ne[3].
func ne(t *formats.Tensor, i int) int64 {
	if t == nil {
		return 1
	}
	s := t.Shape
	if len(s) == 5 {
		if i == 3 {
			return s[0] * s[1]
		}
		s = s[1:]
	}
	n := len(s)
	if i < n {
		return s[n-1-i]
	}
	return 1
}
