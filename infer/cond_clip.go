package infer

import (
	"fmt"
	"math"
)

// clipConditioner is the conditioning of the CLIP families (Family.Conditioner
// "clip"): SD 1.x/2.x (one encoder) and SDXL (CLIP-L and OpenCLIP bigG, their
// hidden states concatenated per token, and the conditioning vector of the
// family's Vector layout), as stable-diffusion.cpp computes it.
type clipConditioner struct {
	m   *Model
	fam *Family
}

func init() {
	conditioners["clip"] = func(m *Model) (conditioner, error) {
		if m.clipTokenizer() == nil {
			return nil, fmt.Errorf("%s: no CLIP tokenizer", m.Path)
		}
		if n := len(m.Config.clipEncoders()); n != len(m.Family.Encoders) {
			return nil, fmt.Errorf("%s: %d text encoders found, %s has %d", m.Path, n, m.Family.Title, len(m.Family.Encoders))
		}
		return &clipConditioner{m: m, fam: m.Family}, nil
	}
}

// chunkLen is the token count of one text-encoder pass: 77, or fewer when an encoder has fewer positions.
func (c *clipConditioner) chunkLen() int {
	n := 77
	for _, t := range c.m.Config.clipEncoders() {
		n = min(n, t.Positions)
	}
	return n
}

func (c *clipConditioner) encode(prompt string, width, height int, zero bool) (*Conditioning, error) {
	return c.encodeFor(prompt, width, height, zero, false)
}

// encodeNegative is encode for the negative prompt (the vector's score parts take their Negative value).
func (c *clipConditioner) encodeNegative(prompt string, width, height int, zero bool) (*Conditioning, error) {
	return c.encodeFor(prompt, width, height, zero, true)
}

func (c *clipConditioner) encodeFor(prompt string, width, height int, zero, negative bool) (*Conditioning, error) {
	m := c.m
	tok := m.clipTokenizer()
	chunk := c.chunkLen()
	encs := m.Config.clipEncoders()
	// Token ids per encoder (they differ only in padding: EOS for CLIP-L,
	// 0 for OpenCLIP); the weights are the same.
	ids := make([][]int, len(encs))
	var weights []float32
	for i, e := range encs {
		pad := e.PadID
		if pad < 0 {
			pad = tok.EOS()
		}
		ids[i], weights = tok.EncodeWeighted(prompt, chunk, pad)
		if c.fam.Encoders[i].Pooled && pad != tok.EOS() {
			zeroAfterEOS(ids[i], chunk, tok.EOS())
		}
		for _, id := range ids[i] {
			if id < 0 || id >= e.Vocab {
				return nil, fmt.Errorf("token id %d outside the %s text encoder's %d rows", id, e.Component, e.Vocab)
			}
		}
	}
	dim := 0
	for i, e := range encs {
		if c.fam.Encoders[i].Hidden {
			dim += e.Hidden
		}
	}
	n := len(ids[0])
	out := &Conditioning{Tokens: n, Dim: dim, Context: make([]float32, n*dim)}
	var pooled [][]float32
	for lo := 0; lo < n; lo += chunk {
		col := 0
		for i := range encs {
			spec := &c.fam.Encoders[i]
			wantPooled := spec.Pooled && lo == 0
			if !spec.Hidden && !wantPooled {
				continue
			}
			at := -1
			if wantPooled {
				at = firstEOS(ids[i][:chunk], tok.EOS())
			}
			h, p, err := m.runCLIP(encs[i], ids[i][lo:lo+chunk], at)
			if err != nil {
				return nil, err
			}
			if wantPooled {
				pooled = append(pooled, p)
			}
			if spec.Hidden {
				w := encs[i].Hidden
				for r := 0; r < chunk; r++ {
					copy(out.Context[(lo+r)*dim+col:(lo+r)*dim+col+w], h[r*w:(r+1)*w])
				}
				col += w
			}
		}
		ctx := out.Context[lo*dim : (lo+chunk)*dim]
		applyWeights(ctx, weights[lo:lo+chunk], dim)
		if zero {
			clear(ctx)
		}
	}
	if len(c.fam.Vector) > 0 {
		v, err := conditioningVector(c.fam.Vector, pooled, width, height, negative)
		if err != nil {
			return nil, err
		}
		if u, ok := m.Config.Network.(vectorTaker); ok && u.vectorWidth() != len(v) {
			return nil, fmt.Errorf("%s: the conditioning vector has %d values, the UNet's label_emb takes %d", m.Path, len(v), u.vectorWidth())
		}
		out.Vector = v
	}
	return out, nil
}

// conditioningVector assembles a conditioning vector from its parts: the
// pooled text embeddings and the sinusoidal embeddings of the image size
// numbers (SDXL: original size, crop top-left and target size, each number
// 256 wide, as sgm's ConcatTimestepEmbedderND) or of a score (the
// refiner's aesthetic score; negative selects the negative prompt's).
func conditioningVector(parts []VectorPart, pooled [][]float32, width, height int, negative bool) ([]float32, error) {
	var v []float32
	h, w := float32(height), float32(width)
	for _, p := range parts {
		var nums []float32
		switch p.Kind {
		case "pooled":
			if len(pooled) == 0 {
				return nil, fmt.Errorf("conditioning vector: no pooled text embedding")
			}
			for _, x := range pooled {
				v = append(v, x...)
			}
			continue
		case "size", "target":
			nums = []float32{h, w}
		case "crop":
			nums = []float32{0, 0}
		case "score":
			nums = []float32{p.Value}
			if negative {
				nums = []float32{p.Negative}
			}
		default:
			return nil, fmt.Errorf("conditioning vector: unknown part %q", p.Kind)
		}
		for _, x := range nums {
			v = appendSinusoid(v, x, p.Dim)
		}
	}
	return v, nil
}

// appendSinusoid appends the sinusoidal embedding of t of width dim (even):
// cos(t·f_j) for j < dim/2, then sin(t·f_j), f_j = 10000^(-j/(dim/2)),
// computed as sd.cpp's timestep_embedding does (frequencies in float64,
// rounded to float32, products in float32).
func appendSinusoid(dst []float32, t float32, dim int) []float32 {
	half := dim / 2
	n := len(dst)
	dst = append(dst, make([]float32, dim)...)
	for j := 0; j < half; j++ {
		f := float32(math.Exp(-math.Log(10000) * float64(j) / float64(half)))
		arg := t * f
		dst[n+j] = float32(math.Cos(float64(arg)))
		dst[n+half+j] = float32(math.Sin(float64(arg)))
	}
	return dst
}
