package names

import (
	"strings"
	"testing"
)

// Every diffusers UNet name of the SD 1.x and SDXL layouts (written down
// independently in layout_test.go) comes back from its LDM name.
func TestDiffusersUNetNameRoundTrip(t *testing.T) {
	for _, c := range []struct {
		v     Version
		names nameList
	}{{SD1, sd1DiffusersUNet()}, {SD2, sd1DiffusersUNet()}, {SDXL, sdxlDiffusersUNet()}} {
		n := 0
		for _, d := range c.names {
			rest, ok := strings.CutPrefix(d, "unet.")
			if !ok {
				continue
			}
			ldm, ok := strings.CutPrefix(Convert(d, c.v), diffusionPrefix)
			if !ok {
				t.Fatalf("%v: %s converts to %s, outside the diffusion model", c.v, d, Convert(d, c.v))
			}
			got, ok := DiffusersUNetName(ldm, c.v)
			if !ok || got != rest {
				t.Errorf("%v: DiffusersUNetName(%q) = %q, %v; want %q", c.v, ldm, got, ok, rest)
			}
			n++
		}
		if n < 300 {
			t.Fatalf("%v: only %d names checked", c.v, n)
		}
	}
}

func TestDiffusersUNetNameRefuses(t *testing.T) {
	for _, c := range []struct {
		ldm string
		v   Version
	}{
		{"input_blocks.1.1.proj_in.weight", Flux},
		{"label_emb.0.0.weight", SD1},
		{"nonsense.weight", SD1},
		{"output_blocks.2.1.proj_in.weight", SD1}, // SD 1.x's output_blocks.2.1 is an upsampler
	} {
		if got, ok := DiffusersUNetName(c.ldm, c.v); ok {
			t.Errorf("DiffusersUNetName(%q, %v) = %q, want refusal", c.ldm, c.v, got)
		}
	}
	// The ambiguous prefix resolves to the upsampler.
	if got, _ := DiffusersUNetName("output_blocks.2.1.conv.weight", SD1); got != "up_blocks.0.upsamplers.0.conv.weight" {
		t.Errorf("SD1 output_blocks.2.1.conv = %q", got)
	}
	if got, _ := DiffusersUNetName("output_blocks.2.2.conv.weight", SDXL); got != "up_blocks.0.upsamplers.0.conv.weight" {
		t.Errorf("SDXL output_blocks.2.2.conv = %q", got)
	}
}
