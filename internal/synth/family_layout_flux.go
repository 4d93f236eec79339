package synth

// Flux.1 (dev, schnell, Fill, Kontext), Chroma and Flux.2 (dev, klein)
// layouts, BFL reference names. Real widths: hidden 3072 (Flux.2 dev
// 6144), head 128, T5/Mistral context 4096/15360, CLIP vector 768.

// layoutFlux1 are Flux.1's tensors; in is img_in's input width (64, Fill
// 384), guidance adds guidance_in (dev, Fill, Kontext).
func layoutFlux1(in string, guidance bool) []string {
	l := joinLines(
		layoutLinear("img_in", "H", in),
		layoutLinear("time_in.in_layer", "H", "256"), layoutLinear("time_in.out_layer", "H", "H"),
		layoutLinear("vector_in.in_layer", "H", "768"), layoutLinear("vector_in.out_layer", "H", "H"),
		layoutLinear("txt_in", "H", "T"),
	)
	if guidance {
		l = append(l, joinLines(layoutLinear("guidance_in.in_layer", "H", "256"), layoutLinear("guidance_in.out_layer", "H", "H"))...)
	}
	for _, s := range []string{"img", "txt"} {
		p := "double_blocks.{i}." + s
		l = append(l, joinLines(
			layoutLinear(p+"_mod.lin", "6H", "H"),
			layoutLinear(p+"_attn.qkv", "3H", "H"),
			[]string{p + "_attn.norm.query_norm.scale D", p + "_attn.norm.key_norm.scale D"},
			layoutLinear(p+"_attn.proj", "H", "H"),
			layoutLinear(p+"_mlp.0", "M", "H"), layoutLinear(p+"_mlp.2", "H", "M"),
		)...)
	}
	return append(l, joinLines(
		layoutLinear("single_blocks.{j}.linear1", "3H+M", "H"), layoutLinear("single_blocks.{j}.linear2", "H", "H+M"),
		[]string{"single_blocks.{j}.norm.query_norm.scale D", "single_blocks.{j}.norm.key_norm.scale D"},
		layoutLinear("single_blocks.{j}.modulation.lin", "3H", "H"),
		layoutLinear("final_layer.linear", "64", "H"), layoutLinear("final_layer.adaLN_modulation.1", "2H", "H"),
	)...)
}

var layoutFluxDims = map[string]int{"H": 64, "D": 16, "M": 256, "T": 128}

// layoutFlux2 are Flux.2's tensors: modulation shared by all blocks, SwiGLU
// MLPs (2M up), no biases, 128 latent channels.
func layoutFlux2() []string {
	l := []string{
		"img_in.weight H 128", "txt_in.weight H T",
		"time_in.in_layer.weight H 256", "time_in.out_layer.weight H H",
		"guidance_in.in_layer.weight H 256", "guidance_in.out_layer.weight H H",
		"double_stream_modulation_img.lin.weight 6H H", "double_stream_modulation_txt.lin.weight 6H H",
		"single_stream_modulation.lin.weight 3H H",
	}
	for _, s := range []string{"img", "txt"} {
		p := "double_blocks.{i}." + s
		l = append(l, p+"_attn.qkv.weight 3H H", p+"_attn.norm.query_norm.scale D", p+"_attn.norm.key_norm.scale D",
			p+"_attn.proj.weight H H", p+"_mlp.0.weight 2M H", p+"_mlp.2.weight H M")
	}
	return append(l, "single_blocks.{j}.linear1.weight 3H+2M H", "single_blocks.{j}.linear2.weight H H+M",
		"single_blocks.{j}.norm.query_norm.scale D", "single_blocks.{j}.norm.key_norm.scale D",
		"final_layer.linear.weight 128 H", "final_layer.adaLN_modulation.1.weight 2H H")
}

func init() {
	addLayout("layout-flux-dev", layout{doc: "Flux.1 dev (guidance_in), 2 double and 2 single blocks", dims: layoutFluxDims, blocks: 2, blocks2: 2, lines: layoutFlux1("64", true)})
	addLayout("layout-flux-schnell", layout{doc: "Flux.1 schnell (no guidance_in)", dims: layoutFluxDims, blocks: 2, blocks2: 2, lines: layoutFlux1("64", false)})
	addLayout("layout-flux-fill", layout{doc: "Flux.1 Fill (img_in takes 384 channels: latents, mask, masked image)", dims: layoutFluxDims, blocks: 1, blocks2: 1, lines: layoutFlux1("384", true)})
	chroma := joinLines(
		layoutLinear("img_in", "H", "64"), layoutLinear("txt_in", "H", "T"),
		layoutLinear("distilled_guidance_layer.in_proj", "H", "64"),
		layoutLinear("distilled_guidance_layer.layers.{i}.in_layer", "H", "H"), layoutLinear("distilled_guidance_layer.layers.{i}.out_layer", "H", "H"),
		[]string{"distilled_guidance_layer.norms.{i}.scale H"},
		layoutLinear("distilled_guidance_layer.out_proj", "H", "H"),
		layoutLinear("double_blocks.{i}.img_attn.qkv", "3H", "H"), layoutLinear("double_blocks.{i}.img_attn.proj", "H", "H"),
		layoutLinear("double_blocks.{i}.txt_attn.qkv", "3H", "H"), layoutLinear("double_blocks.{i}.txt_attn.proj", "H", "H"),
		layoutLinear("double_blocks.{i}.img_mlp.0", "M", "H"), layoutLinear("double_blocks.{i}.img_mlp.2", "H", "M"),
		layoutLinear("single_blocks.{j}.linear1", "3H+M", "H"), layoutLinear("single_blocks.{j}.linear2", "H", "H+M"),
		layoutLinear("final_layer.linear", "64", "H"),
	)
	addLayout("layout-chroma", layout{doc: "Chroma (Flux.1 with distilled_guidance_layer instead of per-block modulation)", dims: layoutFluxDims, blocks: 2, blocks2: 2, lines: chroma})
	addLayout("layout-flux2-dev", layout{doc: "Flux.2 dev (48 single blocks, as sd.cpp tells dev from klein)", dims: map[string]int{"H": 32, "D": 16, "M": 64, "T": 64}, blocks: 1, blocks2: 48, lines: layoutFlux2()})
	addLayout("layout-flux2-klein", layout{doc: "Flux.2 klein (fewer single blocks)", dims: map[string]int{"H": 64, "D": 16, "M": 192, "T": 128}, blocks: 2, blocks2: 4, lines: layoutFlux2()})
}
