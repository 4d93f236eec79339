package family

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
)

// sdcppCase is one file as sd.cpp would load it.
type sdcppCase struct {
	what    string
	tensors []formats.Tensor
}

// sdcppCases builds, from every synthetic layout, the files sd-cli meets:
// the layout as given with -m (no prefix added), the layout given as
// --diffusion-model (under "model.diffusion_model."), that plus a CLIP-L
// given as --clip_l, a checkpoint without its text encoders, and a CLIP-L
// under each prefix sd.cpp's loaders use.
func sdcppCases(t *testing.T) []sdcppCase {
	var out []sdcppCase
	add := func(what string, parts ...[]formats.Tensor) {
		var all []formats.Tensor
		for _, p := range parts {
			all = append(all, p...)
		}
		out = append(out, sdcppCase{what, all})
	}
	clipL := synthTensors(t, synth.Spec{Arch: "layout-clip-l"})
	for _, name := range synth.Archs() {
		ts := synthTensors(t, synth.Spec{Arch: name, Scale: 1.0 / 64, Depth: 1})
		add(name+" (-m)", ts)
		if prefixOf(ts[0].Name) == "" {
			add(name+" (--diffusion-model)", prefixed("model.diffusion_model.", ts))
			add(name+" (--diffusion-model --clip_l)", prefixed("model.diffusion_model.", ts), prefixed("text_encoders.clip_l.transformer.", clipL))
		}
		var noText []formats.Tensor
		for _, x := range ts {
			if !strings.HasPrefix(x.Name, "cond_stage_model.") && !strings.HasPrefix(x.Name, "conditioner.") {
				noText = append(noText, x)
			}
		}
		if len(noText) != len(ts) {
			add(name+" without its text encoders", noText)
		}
		if strings.HasPrefix(name, "layout-wan") {
			// sd.cpp multiplies the patch embedding's real widths in.
			for _, out := range []int64{5120, 3072} {
				wide := make([]formats.Tensor, len(ts))
				for i, x := range ts {
					if x.Name == "patch_embedding.weight" {
						x.Shape = append([]int64{out}, x.Shape[1:]...)
					}
					wide[i] = x
				}
				add(fmt.Sprintf("%s %d wide (--diffusion-model)", name, out), prefixed("model.diffusion_model.", wide))
			}
		}
	}
	for _, p := range append(append([]string{}, sdcppCLIPAt...), "text_encoders.clip_l.transformer.", "text_encoder.", "cond_stage_model.1.transformer.") {
		add("CLIP-L under "+p, prefixed(p, clipL))
	}
	// LDM UNet names under the diffusers prefix: sd.cpp sees no UNet.
	add("sd1 LDM UNet under unet. with te.", prefixed("unet.", synthTensors(t, synth.Spec{Arch: "sd1_unet", Scale: 1.0 / 64})), prefixed("te.", clipL))
	// A diffusers SD 1.x folder as sd.cpp's loader names it, with and
	// without its text encoder, and an SDXL one.
	s := func(d ...int64) []int64 { return d }
	dfSD1 := ts("down_blocks.0.attentions.0.proj_in.weight", s(320, 320, 1, 1), "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight", s(320, 768),
		"mid_block.resnets.1.conv1.weight", s(1280, 1280, 3, 3), "conv_in.weight", s(320, 4, 3, 3))
	dfSDXL := ts("add_embedding.linear_1.weight", s(1280, 2816), "down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k.weight", s(640, 2048),
		"mid_block.resnets.1.conv1.weight", s(1280, 1280, 3, 3), "conv_in.weight", s(320, 4, 3, 3))
	clipG := synthTensors(t, synth.Spec{Arch: "layout-clip-g"})
	add("diffusers sd1 folder", prefixed("unet.", dfSD1), prefixed("te.", clipL))
	add("diffusers sd1 UNet alone", prefixed("unet.", dfSD1))
	add("diffusers sdxl folder", prefixed("unet.", dfSDXL), prefixed("te.", clipL), prefixed("te.1.", clipG))
	return out
}

// TestSDCppVersionFromTable: on every synthetic layout, loaded the ways
// sd-cli loads files, the sd.cpp version that the family table derives
// from family.Detect's result (Architecture.SDCpp) is the one sd.cpp's
// get_sd_version gives (the oracle). The table's SDCppAt and SDCppNeeds
// columns carry sd.cpp's quirks. Not covered, on purpose: an SDXL UNet
// beside CLIP-L alone, which sd.cpp names SD 1.x with the variant its
// tests read off the SDXL UNet (no tool writes such a file; the table says
// sdxs-512-ds, CLIP-L's own version, which converts alike).
func TestSDCppVersionFromTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range sdcppCases(t) {
		want := sdcppOracle(c.tensors)
		got := Detect(c.tensors, nil).SDCpp()
		seen[want] = true
		if got != want {
			t.Errorf("%s: table says sd.cpp version %q, sd.cpp's rules %q", c.what, got, want)
		}
	}
	// The cases reach the versions that change sd.cpp's name conversion.
	for _, v := range []string{"", "sd1", "sd1-inpaint", "sd2", "sdxl", "sdxl-inpaint", "sdxs-512-ds", "sd3", "flux", "flux-fill", "flux2", "flux2-klein",
		"wan2", "wan2.2-i2v", "wan2.2-ti2v", "svd", "qwen-image", "z-image", "hunyuan-video", "krea2", "ltxav", "minimax-h3"} {
		if !seen[v] {
			t.Errorf("no case where sd.cpp names version %q", v)
		}
	}
}
