package sd3

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// SD3Config is an SD 3 / 3.5 MMDiT's configuration, detected from tensor
// shapes as sd.cpp's MMDiTConfig is (widths from the embedders, depth from
// the highest joint block, heads equal to the depth: SD3's width is 64
// per block).
type SD3Config struct {
	// Hidden is the width (64·Depth: 1536 for medium, 2432 for 3.5 large),
	// Heads·HeadDim splits it (Heads = Depth).
	Hidden, Heads, HeadDim int
	// Depth is the number of joint blocks; the last one's context block
	// only feeds the attention (pre_only).
	Depth int
	// XSelf is how many leading blocks give the image stream a second,
	// image-only attention (attn2: MMDiT-X, 3.5 medium's 13; 0 otherwise).
	XSelf int
	// QKNorm is the queries' and keys' per-head norm: "rms" (3.5), "ln", or "" (3 medium).
	QKNorm string
	// MLP is the feed-forward width (4·Hidden).
	MLP int
	// InChannels and OutChannels are the latent channels (16), Patch the patch size (2).
	InChannels, OutChannels, Patch int
	// ContextDim is the text tokens' width (4096) and ADMIn the pooled vector's (2048).
	ContextDim, ADMIn int
	// PosMax is the side of the square learned position table (192; 384 for 3.5 medium).
	PosMax int
}

// LatentChannels is the VAE latent's channel count.
func (c *SD3Config) LatentChannels() int { return c.InChannels }

func init() {
	infer.RegisterNetworkDetector("mmdit", func(s infer.Shapes, md formats.Metadata, cfg *infer.ModelConfig) error {
		c, err := detectSD3(s)
		if err != nil {
			return err
		}
		cfg.Network = c
		return nil
	})
}

// detectSD3 reads an MMDiT's configuration under model.diffusion_model.
func detectSD3(s infer.Shapes) (*SD3Config, error) {
	p := infer.DmPrefix
	c := &SD3Config{}
	x, ok := s[p+"x_embedder.proj.weight"]
	if !ok || len(x) != 4 || x[2] != x[3] {
		return nil, fmt.Errorf("tensor %q: want a square 4-D patch kernel, have %v", p+"x_embedder.proj.weight", x)
	}
	c.Hidden, c.InChannels, c.Patch = int(x[0]), int(x[1]), int(x[2])
	var err error
	if c.ContextDim, err = s.Dim(p+"context_embedder.weight", 1); err != nil {
		return nil, err
	}
	if c.ADMIn, err = s.Dim(p+"y_embedder.mlp.0.weight", 1); err != nil {
		return nil, err
	}
	out, err := s.Dim(p+"final_layer.linear.weight", 0)
	if err != nil {
		return nil, err
	}
	c.OutChannels = out / (c.Patch * c.Patch)
	pos, ok := s[p+"pos_embed"]
	if !ok || len(pos) != 3 || pos[2] != int64(c.Hidden) {
		return nil, fmt.Errorf("tensor %q: want [1, N, %d], have %v", p+"pos_embed", c.Hidden, pos)
	}
	c.PosMax = int(math.Sqrt(float64(pos[1])))
	if c.PosMax*c.PosMax != int(pos[1]) {
		return nil, fmt.Errorf("tensor %q: %d positions are not a square", p+"pos_embed", pos[1])
	}
	for n := range s {
		r, ok := strings.CutPrefix(n, p+"joint_blocks.")
		if !ok {
			continue
		}
		i, err := strconv.Atoi(r[:max(strings.IndexByte(r, '.'), 0)])
		if err != nil {
			continue
		}
		c.Depth = max(c.Depth, i+1)
		if strings.Contains(r, ".x_block.attn2.") {
			c.XSelf = max(c.XSelf, i+1)
		}
	}
	if c.Depth == 0 || c.Hidden%c.Depth != 0 {
		return nil, fmt.Errorf("%d joint blocks do not split the width %d into heads (SD3's heads are as many as its blocks)", c.Depth, c.Hidden)
	}
	c.Heads, c.HeadDim = c.Depth, c.Hidden/c.Depth
	switch ln := p + "joint_blocks.0.x_block.attn.ln_q."; {
	case s.Has(ln + "bias"):
		c.QKNorm = "ln"
	case s.Has(ln + "weight"):
		c.QKNorm = "rms"
	}
	if c.MLP, err = s.Dim(p+"joint_blocks.0.x_block.mlp.fc1.weight", 0); err != nil {
		return nil, err
	}
	if c.OutChannels != c.InChannels {
		return nil, fmt.Errorf("x_embedder takes %d channels and final_layer gives %d", c.InChannels, c.OutChannels)
	}
	return c, c.checkBlocks(s)
}

// checkBlocks checks that every joint block has what the graph reads, in
// the shapes it needs.
func (c *SD3Config) checkBlocks(s infer.Shapes) error {
	h, mlp, d := int64(c.Hidden), int64(c.MLP), int64(c.HeadDim)
	for i := 0; i < c.Depth; i++ {
		for _, st := range []string{"context_block", "x_block"} {
			b := fmt.Sprintf("%sjoint_blocks.%d.%s.", infer.DmPrefix, i, st)
			last := st == "context_block" && i == c.Depth-1
			mods := int64(6)
			switch {
			case last:
				mods = 2
			case st == "x_block" && i < c.XSelf:
				mods = 9
			}
			want := map[string][]int64{"adaLN_modulation.1.weight": {mods * h, h}, "attn.qkv.weight": {3 * h, h}}
			if !last {
				want["attn.proj.weight"] = []int64{h, h}
				want["mlp.fc1.weight"] = []int64{mlp, h}
				want["mlp.fc2.weight"] = []int64{h, mlp}
			}
			if st == "x_block" && i < c.XSelf {
				want["attn2.qkv.weight"] = []int64{3 * h, h}
				want["attn2.proj.weight"] = []int64{h, h}
			}
			if c.QKNorm != "" {
				want["attn.ln_q.weight"] = []int64{d}
				want["attn.ln_k.weight"] = []int64{d}
			}
			for n, sh := range want {
				if err := s.Want(b+n, sh); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
