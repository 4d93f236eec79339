package synth

import (
	"strings"
	"testing"
)

// ZImageTurbo has the release's shapes: sd.cpp's z_image.hpp defaults (30
// layers and two refiners of each kind, 3840 wide, 30 heads of 128, FF
// 10240, captions 2560 wide) and Qwen3-4B's 36 layers, which puts the DiT
// at about 6.15 B parameters and the LLM at about 4.02 B.
func TestZImageTurboShapes(t *testing.T) {
	params := func(flag string) (n int64, count map[string]int) {
		count = map[string]int{}
		for _, ts := range ZImageTurbo.Part(flag) {
			e := int64(1)
			for _, d := range ts.Shape {
				e *= d
			}
			n += e
			// One tensor per block: the DiT's attention_norm1, the LLM's input norm.
			if strings.HasSuffix(ts.Name, ".attention_norm1.weight") || strings.HasSuffix(ts.Name, ".input_layernorm.weight") {
				count[ts.Name[:strings.Index(ts.Name, ".")]]++
			}
		}
		return n, count
	}
	dit, blocks := params("diffusion-model")
	if blocks["layers"] != 30 || blocks["noise_refiner"] != 2 || blocks["context_refiner"] != 2 {
		t.Errorf("DiT blocks %v, want 30 layers and 2 refiners of each kind", blocks)
	}
	if dit < 6.10e9 || dit > 6.20e9 {
		t.Errorf("DiT %d parameters, want about 6.15 B", dit)
	}
	llm, layers := params("llm")
	if layers["model"] != 36 {
		t.Errorf("LLM layers %v, want 36", layers)
	}
	if llm < 4.0e9 || llm > 4.05e9 {
		t.Errorf("LLM %d parameters, want about 4.02 B", llm)
	}
}
