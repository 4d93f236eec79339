package synth

// UNet checkpoint layouts: LDM/SGM single files with their text encoders
// and VAE under the original prefixes. The UNet is 32 channels wide, but
// the cross-attention context and the text encoders' widths are real,
// because detection reads them; repeated blocks are cut to one.

// layoutUNet returns a whole-checkpoint arch: a UNet of u with context ctx,
// an LDM VAE and the given text encoders.
func layoutUNet(u unetConfig, ctx int, texts ...component) archDef {
	return archDef{parts: func(scaler) []component {
		u.ModelChannels = 32
		for i, d := range u.Depth {
			u.Depth[i] = min(d, 1)
		}
		u.MiddleDepth = 1
		unet := scaledUNet{unetConfig: u, ctx: ctx}
		vae := vaeConfig{Ch: 32, InCh: 3, ZCh: 4, Mult: []int{1, 2}, NumRes: 1}
		return append([]component{
			{"model.diffusion_model.", "diffusion", unet.build},
			{"first_stage_model.", "vae", vae.build},
		}, texts...)
	}}
}

// layoutSmallCLIP is a one-layer CLIP text model of real width h.
func layoutSmallCLIP(h int, proj bool) clipConfig {
	return clipConfig{Hidden: h, FF: 256, Layers: 1, Vocab: 64, Positions: 77, Projection: proj}
}

func init() {
	clone := func(u unetConfig, in int) unetConfig {
		u.Depth = append([]int(nil), u.Depth...)
		u.InChannels = in
		return u
	}
	l := layoutSmallCLIP(768, false)
	sd1Text := component{"cond_stage_model.transformer.text_model.", "text", l.buildHF}
	add := func(name, doc string, a archDef) {
		a.doc = doc
		archs[name] = a
	}
	add("layout-sd1", "SD 1.x checkpoint (UNet, VAE, CLIP-L under cond_stage_model.transformer.)", layoutUNet(clone(sd1UNet, 4), 768, sd1Text))
	add("layout-sd1-inpaint", "SD 1.x inpainting checkpoint (9 input channels)", layoutUNet(clone(sd1UNet, 9), 768, sd1Text))
	sd2 := clone(sd1UNet, 4)
	sd2.LinearProj = true
	h := layoutSmallCLIP(1024, false)
	add("layout-sd2", "SD 2.x checkpoint (linear proj_in, context 1024, OpenCLIP ViT-H under cond_stage_model.model.)", layoutUNet(sd2, 1024,
		component{"cond_stage_model.model.", "text", h.buildOpenCLIP}))
	g := layoutSmallCLIP(1280, true)
	xlText := []component{
		{"conditioner.embedders.0.transformer.text_model.", "text", l.buildHF},
		{"conditioner.embedders.1.model.", "text", g.buildOpenCLIP},
	}
	xl := clone(sdxlUNet, 4)
	xl.ADMIn = 2816
	add("layout-sdxl", "SDXL base checkpoint (label_emb, context 2048, CLIP-L and OpenCLIP bigG)", layoutUNet(xl, 2048, xlText...))
	add("layout-sdxl-inpaint", "SDXL inpainting checkpoint (9 input channels)", layoutUNet(clone(xl, 9), 2048, xlText...))
	// The refiner: 384 channels and 4 levels in the real model, context
	// 1280 (bigG alone, as conditioner.embedders.0), ADM input 2560.
	ref := unetConfig{InChannels: 4, OutChannels: 4, Mult: []int{1, 2, 4, 4}, NumRes: 2, Depth: []int{0, 4, 4, 0}, MiddleDepth: 4, LinearProj: true, ADMIn: 2560}
	add("layout-sdxl-refiner", "SDXL refiner checkpoint (context 1280, OpenCLIP bigG alone)", layoutUNet(ref, 1280,
		component{"conditioner.embedders.0.model.", "text", g.buildOpenCLIP}))
}
