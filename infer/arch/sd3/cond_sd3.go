package sd3

import (
	"fmt"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/clip"
	"github.com/sdtool/sdtool/infer/encoder/t5"
)

// sd3Conditioner is SD 3 / 3.5's conditioning (Family.Conditioner "sd3"),
// as sd.cpp's SD3CLIPEmbedder computes it, per chunk of 77 tokens: CLIP-L's
// and CLIP-G's penultimate hidden states (no final norm) side by side,
// zero-padded to the DiT's context width (4096), then T5-XXL's 77 hidden
// states below them, so a chunk is 154 tokens; each encoder's states are
// weighted on their own. The vector is CLIP-L's and CLIP-G's pooled
// outputs (final norm at the first end-of-text token; CLIP-G's through
// text_projection) of the first chunk. An absent encoder gives zeros, as
// sd-cli's.
type sd3Conditioner struct {
	m          *infer.Model
	l, g       *clip.CLIPConfig // nil when absent
	t5         *t5.T5Config     // nil when absent
	ctxDim     int              // the DiT's text token width
	lDim, gDim int              // the CLIP widths the layout reserves (768, 1280)
}

// sd3Chunk is the token count of one pass of each encoder.
const sd3Chunk = 77

func init() {
	infer.RegisterConditioner("sd3", func(m *infer.Model) (infer.Conditioner, error) {
		f, ok := m.Config.Network.(*SD3Config)
		if !ok {
			return nil, fmt.Errorf("%s: no MMDiT configuration", m.Path)
		}
		c := &sd3Conditioner{m: m, t5: t5.T5(m.Config), ctxDim: f.ContextDim, lDim: 768, gDim: 1280}
		c.l, _ = clip.CLIPEncoder(m.Config, "clip_l")
		c.g, _ = clip.CLIPEncoder(m.Config, "clip_g")
		if c.l != nil {
			c.lDim = c.l.Hidden
		}
		if c.g != nil {
			c.gDim = c.g.Hidden
		}
		switch {
		case c.lDim+c.gDim > f.ContextDim || c.lDim+c.gDim != f.ADMIn:
			return nil, fmt.Errorf("%s: CLIP-L and CLIP-G are %d and %d wide; the DiT takes %d-wide tokens and a %d-wide vector", m.Path, c.lDim, c.gDim, f.ContextDim, f.ADMIn)
		case c.t5 != nil && c.t5.Hidden != f.ContextDim:
			return nil, fmt.Errorf("%s: T5 is %d wide, the DiT's context_embedder takes %d", m.Path, c.t5.Hidden, f.ContextDim)
		case (c.l != nil || c.g != nil) && clip.CLIPTokenizer(m) == nil:
			return nil, fmt.Errorf("%s: no CLIP tokenizer", m.Path)
		}
		return c, nil
	})
}

// clipPart is one CLIP encoder's hidden states over every chunk and its pooled output.
func (c *sd3Conditioner) clipPart(e *clip.CLIPConfig, prompt string) (hidden, pooled []float32, chunks int, err error) {
	tok := clip.CLIPTokenizer(c.m)
	pad := e.PadID
	if pad < 0 {
		pad = tok.EOS()
	}
	ids, weights := tok.EncodeWeightedBreakAsText(prompt, sd3Chunk, pad)
	if pad != tok.EOS() {
		clip.ZeroAfterEOS(ids, sd3Chunk, tok.EOS())
	}
	for _, id := range ids {
		if id < 0 || id >= e.Vocab {
			return nil, nil, 0, fmt.Errorf("token id %d outside the %s text encoder's %d rows", id, e.Component, e.Vocab)
		}
	}
	for lo := 0; lo < len(ids); lo += sd3Chunk {
		at := -1
		if lo == 0 {
			at = clip.FirstEOS(ids[:sd3Chunk], tok.EOS())
		}
		h, p, err := clip.RunCLIP(c.m, e, ids[lo:lo+sd3Chunk], at)
		if err != nil {
			return nil, nil, 0, err
		}
		infer.ApplyWeights(h, weights[lo:lo+sd3Chunk], e.Hidden)
		hidden = append(hidden, h...)
		if lo == 0 {
			pooled = p
		}
	}
	return hidden, pooled, len(ids) / sd3Chunk, nil
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *sd3Conditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	type part struct {
		hidden, pooled []float32
		chunks, dim    int
	}
	parts := [2]part{{dim: c.lDim}, {dim: c.gDim}}
	for i, e := range []*clip.CLIPConfig{c.l, c.g} {
		if e == nil {
			continue
		}
		var err error
		if parts[i].hidden, parts[i].pooled, parts[i].chunks, err = c.clipPart(e, prompt); err != nil {
			return nil, err
		}
	}
	var t5h []float32
	t5Chunks := 0
	if c.t5 != nil {
		h, n, err := t5.T5Context(c.m, t5.T5Tokenizer(c.m), prompt, sd3Chunk)
		if err != nil {
			return nil, err
		}
		t5h, t5Chunks = h, n/sd3Chunk
	}
	chunks := max(parts[0].chunks, parts[1].chunks, t5Chunks, 1)
	d := c.ctxDim
	out := &infer.Conditioning{Tokens: 2 * sd3Chunk * chunks, Dim: d, Context: make([]float32, 2*sd3Chunk*chunks*d)}
	for k := 0; k < chunks; k++ {
		base := 2 * sd3Chunk * k * d
		col := 0
		for _, p := range parts {
			if k < p.chunks {
				for r := 0; r < sd3Chunk; r++ {
					src := p.hidden[(k*sd3Chunk+r)*p.dim : (k*sd3Chunk+r+1)*p.dim]
					copy(out.Context[base+r*d+col:], src)
				}
			}
			col += p.dim
		}
		if k < t5Chunks {
			copy(out.Context[base+sd3Chunk*d:base+2*sd3Chunk*d], t5h[k*sd3Chunk*d:(k+1)*sd3Chunk*d])
		}
	}
	if zero {
		clear(out.Context)
	}
	out.Vector = make([]float32, 0, c.lDim+c.gDim)
	for _, p := range parts {
		if p.pooled == nil {
			p.pooled = make([]float32, p.dim)
		}
		out.Vector = append(out.Vector, p.pooled...)
	}
	return out, nil
}
