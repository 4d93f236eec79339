package names

import (
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// DetectVersion returns the model version sd.cpp's get_sd_version would
// report for these tensors: their names as loaded (with the prefixes the
// loader adds, before any conversion) and, where sd.cpp looks at them, their
// shapes. Tensors should come in sd.cpp's load order, because like sd.cpp the
// first marker of a family that returns early wins.
func DetectVersion(tensors []formats.Tensor) Version {
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
	substr string  // the name contains this
	exact  bool    // the name must equal substr instead
	also   string  // and the model must hold this exact name too
	v      Version // then it is this version
}

// The early markers in sd.cpp's order. Families this package does not model
// report Other (PID, Ideogram 4, HiDream-O1, Lens, MiniT2I, SenseNova,
// ...).
var earlyMarkers = []earlyMarker{
	{substr: "model.diffusion_model.net.lq_proj.latent_proj.0.weight", v: Other},
	{substr: "embed_image_indicator.weight", v: Other},
	{substr: "model.diffusion_model.txtfusion.projector.weight", v: Krea2},
	{substr: "model.diffusion_model.text_fusion.projector.weight", v: Krea2},
	{substr: "model.diffusion_model.nerf_final_layer_conv.", v: ChromaRadiance},
	{substr: "model.diffusion_model.joint_blocks.", v: SD3},
	{substr: "model.x_embedder.proj1.weight", also: "model.language_model.layers.0.self_attn.q_proj.weight", v: Other},
	{substr: "model.diffusion_model.transformer_blocks.0.attn.norm_added_q.weight", also: "model.diffusion_model.transformer_blocks.0.img_mlp.w1.weight", v: Other},
	{substr: "net.img_embedder.proj1.weight", v: Other},
	{substr: "language_model.model.layers.0.self_attn.q_proj_mot_gen.weight", v: Other},
	{substr: "model.diffusion_model.txt_in.text_norm.weight", exact: true, v: Other},
	{substr: "model.diffusion_model.transformer_blocks.0.img_mod.1.weight", v: QwenImage}, // refined in see
	{substr: "model.diffusion_model.txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.weight", v: HunyuanVideo},
	{substr: "llm_adapter.blocks.0.cross_attn.q_proj.weight", v: Anima},
}

// Markers checked after the Flux.2 flag, again in sd.cpp's order.
var lateMarkers = []earlyMarker{
	{substr: "dual_time_embed.semantic_embedder.linear_1.weight", v: Other},
	{substr: "model.diffusion_model.double_blocks.0.img_mlp.gate_proj.weight", v: OvisImage},
	{substr: "model.diffusion_model.cap_embedder.0.weight", v: ZImage},
	{substr: "double_stream_layers.0.img_instruct_attn.processor.img_to_q.weight", v: Other},
	{substr: "model.diffusion_model.layers.0.adaLN_sa_ln.weight", v: Other},
	{substr: "model.diffusion_model.adaln_single.emb.timestep_embedder.linear_1.bias", v: Other},
	{substr: "model.diffusion_model.video_patch_proj.weight", also: "model.diffusion_model.audio_patch_proj.weight", v: Other},
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
func (d *detector) see(t *formats.Tensor) (v Version, done bool) {
	name := t.Name
	if containsEither(name, "model.diffusion_model.double_blocks.", "model.diffusion_model.single_transformer_blocks.") {
		d.flux = true
	}
	for i := range earlyMarkers {
		if earlyMarkers[i].match(d, name) {
			v := earlyMarkers[i].v
			if v == QwenImage && (ne(d.get("model.diffusion_model.img_in.weight"), 0) == 128 || d.has("model.diffusion_model.time_text_embed.addition_t_embedding.weight")) {
				// MAGE-Flow and Qwen-Image-Layered share the marker.
				v = Other
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
		return Other, true
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
		return SVD, true
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
	return Unknown, false
}

// decide turns the collected flags into a version, as sd.cpp does after its
// scan.
func (d *detector) decide() Version {
	if d.wan {
		switch {
		case d.s2v:
			return Other // Wan 2.2 S2V
		case d.patchChannels == 184320 && !d.imgEmb:
			return Wan22I2V
		case d.patchChannels == 147456 && !d.imgEmb:
			return Wan22TI2V
		}
		return Wan2
	}
	inChannels := ne(d.inputBlock, 2)
	inpaint, edit := inChannels == 9, inChannels == 8
	switch {
	case d.xl:
		switch {
		case inpaint:
			return SDXLInpaint
		case edit:
			return SDXLPix2Pix
		case !d.middle1 && !d.output311:
			return SDXLVega
		case !d.middle1:
			return SDXLSSD1B
		}
		return SDXL
	case d.flux && !d.flux2:
		if ne(d.contextEmbedding, 0) == 3584 {
			return LongCat
		}
		switch ne(d.inputBlock, 0) {
		case 384:
			return FluxFill
		case 128:
			return FluxControls
		case 196:
			return Flex2
		}
		return Flux
	case d.flux2:
		if d.single47 {
			return Flux2
		}
		return Flux2Klein
	}
	switch ne(d.tokenEmbedding, 0) {
	case 768:
		switch {
		case inpaint:
			return SD1Inpaint
		case edit:
			return SD1Pix2Pix
		case !d.middle1 && !d.output71:
			return SDXS512DS
		case !d.middle1:
			return SD1TinyUNet
		}
		return SD1
	case 1024:
		switch {
		case inpaint:
			return SD2Inpaint
		case !d.middle1 && d.attn1024:
			return SDXS09
		case !d.middle1:
			return SD2TinyUNet
		}
		return SD2
	}
	return Unknown
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
