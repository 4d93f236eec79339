package flux

import (
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// Flux2Config is a Flux.2 DiT's configuration (klein and dev): Flux.1's
// double- and single-stream blocks with gated MLPs (3·Hidden after the
// gate) and no biases, whose shifts, scales and gates come from three
// modulation layers shared by every block (double_stream_modulation_img,
// double_stream_modulation_txt, single_stream_modulation), RoPE over four
// axes (index, row, column, text token) with base 2000, and 128 input
// channels (2×2 patches of a 32-channel latent), detected from shapes as
// sd.cpp does. It has no pooled vector; dev has a guidance embedding,
// klein none.
type Flux2Config struct {
	FluxConfig
}

// flux2Axes is Flux.2's RoPE split of a 128-wide head.
var flux2Axes = []int{32, 32, 32, 32}

// flux2Theta is Flux.2's RoPE base.
const flux2Theta = 2000

// flux2Mods are the shared modulation layers and their chunk counts.
var flux2Mods = []struct {
	name   string
	chunks int
}{
	{"double_stream_modulation_img.lin", 6},
	{"double_stream_modulation_txt.lin", 6},
	{"single_stream_modulation.lin", 3},
}

func init() {
	infer.RegisterNetworkDetector("flux2", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectFlux2(s, md)
		if err != nil {
			return err
		}
		cfg.Network = c
		return nil
	})
}

// detectFlux2 reads a Flux.2 DiT's configuration under model.diffusion_model.
func detectFlux2(s infer.Shapes, md formats.Metadata) (*Flux2Config, error) {
	f, err := detectFluxLayout(s, md, false, flux2Axes)
	if err != nil {
		return nil, err
	}
	if !f.GatedMLP {
		return nil, fmt.Errorf("%sdouble_blocks.0.img_mlp.0.weight is not twice as wide as img_mlp.2's input: Flux.2's MLPs are gated", infer.DmPrefix)
	}
	if f.VecDim != 0 {
		return nil, fmt.Errorf("%svector_in: Flux.2 has no pooled vector", infer.DmPrefix)
	}
	f.Theta = flux2Theta
	h := int64(f.Hidden)
	for _, m := range flux2Mods {
		if err := s.Want(infer.DmPrefix+m.name+".weight", []int64{int64(m.chunks) * h, h}); err != nil {
			return nil, err
		}
	}
	return &Flux2Config{FluxConfig: *f}, nil
}
