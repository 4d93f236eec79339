package names_test

import (
	"fmt"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
)

func ExampleConvert() {
	// A diffusers SD 1.5 folder, as sd.cpp's loader prefixes it.
	fmt.Println(names.Convert("unet.down_blocks.0.attentions.0.proj_in.weight", names.SD1))
	fmt.Println(names.Convert("vae.decoder.mid_block.attentions.0.to_q.weight", names.SD1))
	// SD 2.x's open_clip text encoder: renamed, in_proj left fused.
	fmt.Println(names.Convert("cond_stage_model.model.transformer.resblocks.3.attn.in_proj_weight", names.SD2))
	// Flux diffusers: to_k becomes part 1 of the fused qkv, which sd.cpp
	// assembles at load time.
	fmt.Println(names.Convert("model.diffusion_model.transformer_blocks.0.attn.to_k.weight", names.Flux))
	// Output:
	// model.diffusion_model.input_blocks.1.1.proj_in.weight
	// first_stage_model.decoder.mid.attn_1.q.weight
	// cond_stage_model.transformer.text_model.encoder.layers.3.self_attn.in_proj.weight
	// model.diffusion_model.double_blocks.0.img_attn.qkv.weight.1
}

func ExampleVersionOf() {
	// An SD 1.x inpainting checkpoint (9 input channels) with its CLIP-L,
	// whose token embedding's width is what sd.cpp reads SD 1.x from.
	tensors := []formats.Tensor{
		{Name: "model.diffusion_model.input_blocks.0.0.weight", Shape: []int64{320, 9, 3, 3}},
		{Name: "model.diffusion_model.input_blocks.1.1.proj_in.weight", Shape: []int64{320, 320, 1, 1}},
		{Name: "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", Shape: []int64{320, 768}},
		{Name: "model.diffusion_model.middle_block.1.proj_in.weight", Shape: []int64{1280, 1280, 1, 1}},
		{Name: "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight", Shape: []int64{49408, 768}},
		{Name: "cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight", Shape: []int64{768, 768}},
	}
	fmt.Println(names.VersionOf(family.Detect(tensors, nil)))
	// Without the text encoder sd.cpp names no version.
	fmt.Println(names.VersionOf(family.Detect(tensors[:4], nil)))
	// Output:
	// sd1-inpaint
	// unknown
}

func ExampleConvertAll() {
	_, err := names.ConvertAll([]string{"unet.conv_in.weight", "model.diffusion_model.input_blocks.0.0.weight"}, names.SD1)
	fmt.Println(err)
	// Output: names: tensors "unet.conv_in.weight" and "model.diffusion_model.input_blocks.0.0.weight" both convert to "model.diffusion_model.input_blocks.0.0.weight"
}
