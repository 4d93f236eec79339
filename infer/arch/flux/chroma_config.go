package flux

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// ChromaConfig is a Chroma DiT's configuration: Flux.1's blocks without
// their modulation layers, whose shifts, scales and gates come from the
// approximator (distilled_guidance_layer), detected from tensor shapes.
type ChromaConfig struct {
	FluxConfig
	// ApproxIn is the approximator's input width (64: 16 for the time, 16
	// for the guidance, 32 for the modulation index), ApproxInner its
	// width (5120) and ApproxLayers its residual layers (5).
	ApproxIn, ApproxInner, ApproxLayers int
}

// The approximator's modulation rows, as sd.cpp indexes them: the layout
// of the full model (38 single blocks of 3 rows, then 19 double blocks of
// 6 rows for the image stream and 19 for the text stream, then the final
// layer's shift and scale) whatever the model's own depth.
const (
	chromaSingleRows = 38
	chromaDoubleRows = 19
	chromaModRows    = 3*chromaSingleRows + 2*6*chromaDoubleRows + 2
)

// chromaApproxPrefix is where the approximator's weights live.
const chromaApproxPrefix = infer.DmPrefix + "distilled_guidance_layer."

func init() {
	infer.RegisterNetworkDetector("chroma", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectChroma(s, md)
		if err != nil {
			return err
		}
		cfg.Network = c
		return nil
	})
}

// detectChroma reads a Chroma DiT's configuration under model.diffusion_model.
func detectChroma(s infer.Shapes, md formats.Metadata) (*ChromaConfig, error) {
	f, err := detectFluxDiT(s, md, false)
	if err != nil {
		return nil, err
	}
	if f.Double > chromaDoubleRows || f.Single > chromaSingleRows {
		return nil, fmt.Errorf("%d double and %d single blocks: the approximator modulates at most %d and %d", f.Double, f.Single, chromaDoubleRows, chromaSingleRows)
	}
	c := &ChromaConfig{FluxConfig: *f}
	p := chromaApproxPrefix
	if c.ApproxInner, err = s.Dim(p+"in_proj.weight", 0); err != nil {
		return nil, err
	}
	if c.ApproxIn, err = s.Dim(p+"in_proj.weight", 1); err != nil {
		return nil, err
	}
	if c.ApproxIn != 64 {
		return nil, fmt.Errorf("tensor %q: takes %d values, want 64 (16 time, 16 guidance, 32 index)", p+"in_proj.weight", c.ApproxIn)
	}
	for n := range s {
		if r, ok := strings.CutPrefix(n, p+"layers."); ok {
			i, err := strconv.Atoi(r[:max(strings.IndexByte(r, '.'), 0)])
			if err == nil && i+1 > c.ApproxLayers {
				c.ApproxLayers = i + 1
			}
		}
	}
	in, h := int64(c.ApproxInner), int64(c.Hidden)
	for i := 0; i < c.ApproxLayers; i++ {
		l := fmt.Sprintf("%slayers.%d.", p, i)
		for _, w := range []struct {
			name string
			want []int64
		}{
			{l + "in_layer.weight", []int64{in, in}},
			{l + "out_layer.weight", []int64{in, in}},
			{fmt.Sprintf("%snorms.%d.scale", p, i), []int64{in}},
		} {
			if err := s.Want(w.name, w.want); err != nil {
				return nil, err
			}
		}
	}
	if err := s.Want(p+"out_proj.weight", []int64{h, in}); err != nil {
		return nil, err
	}
	return c, nil
}
