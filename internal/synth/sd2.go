package synth

// SD 2.x as a whole checkpoint at real sizes, for parity with sd-cli. sd.cpp
// detects SD 2.x from the OpenCLIP ViT-H token embedding (1024 wide under
// cond_stage_model.model.) and fixes that text model's width and depth (24
// layers, 16 heads), so Spec.TextScale should stay 1; it reads the UNet's
// width from time_embed and input_blocks.0 but fixes its depth and 64-wide
// heads, so Spec.Scale may narrow the UNet to any multiple of 64 channels.
// Whether the UNet predicts v or ε is not written down: sd.cpp and sdtool
// both probe it.

// clipH is OpenCLIP ViT-H/14's text tower as SD 2.x ships it (text_projection
// and logit_scale included).
var clipH = clipConfig{Hidden: 1024, FF: 4096, Layers: 24, Vocab: 49408, Positions: 77, Projection: true, LogitScale: true}

// sd2UNet is SD 2.x's UNet: SD 1.x's levels with linear proj_in/proj_out.
var sd2UNet = unetConfig{
	InChannels: 4, OutChannels: 4, ModelChannels: 320, Mult: []int{1, 2, 4, 4}, NumRes: 2,
	Depth: []int{1, 1, 1, 0}, MiddleDepth: 1, LinearProj: true,
}

func init() {
	archs["sd2"] = archDef{
		doc: "Stable Diffusion 2.x checkpoint: LDM UNet (linear proj_in, context 1024), VAE and OpenCLIP ViT-H (cond_stage_model.model.)",
		parts: func(s scaler) []component {
			text := s.clip(clipH, "text")
			unet := s.unet(sd2UNet)
			unet.ctx = text.Hidden
			return []component{
				{"model.diffusion_model.", "diffusion", unet.build},
				{"first_stage_model.", "vae", s.vae(sd1VAE).build},
				{"cond_stage_model.model.", "text", text.buildOpenCLIP},
			}
		},
	}
}
