package merge_test

import (
	"fmt"
	"log"

	"github.com/sdtool/sdtool/merge"
)

// How a recipe source selects and names tensors: include/exclude are
// searched in the source's own names, and output names are made by
// strip_prefix, then rename, then prefix.
func ExampleParseRecipe() {
	r, err := merge.ParseRecipe("recipe.json", []byte(`{"sources": [
		{"path": "model.safetensors", "include": ["^model\\.diffusion_model\\."], "exclude": ["\\.bias$"],
		 "strip_prefix": "model.diffusion_model.", "rename": [["^input_blocks\\.", "in."]], "prefix": "unet."}]}`))
	if err != nil {
		log.Fatal(err)
	}
	s := &r.Sources[0]
	for _, name := range []string{
		"model.diffusion_model.input_blocks.1.0.weight",
		"model.diffusion_model.input_blocks.1.0.bias",
		"first_stage_model.decoder.conv_in.weight",
	} {
		if s.Selects(name) {
			out, _ := s.OutputName(name)
			fmt.Println(name, "->", out)
		} else {
			fmt.Println(name, "not selected")
		}
	}
	_, err = merge.ParseRecipe("recipe.json", []byte(`{"sources": [{"path": "m.safetensors", "include": [1]}]}`))
	fmt.Println(err)
	// Output:
	// model.diffusion_model.input_blocks.1.0.weight -> unet.in.1.0.weight
	// model.diffusion_model.input_blocks.1.0.bias not selected
	// first_stage_model.decoder.conv_in.weight not selected
	// recipe.json: sources[0].include[0]: want a string, got a number
}
