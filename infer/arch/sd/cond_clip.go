package sd

import (
	"fmt"
	"math"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/clip"
)

// clipConditioner is the conditioning of the CLIP families (Family.Conditioner
// "clip"): SD 1.x/2.x (one encoder) and SDXL (CLIP-L and OpenCLIP bigG, their
// hidden states concatenated per token, and the conditioning vector of the
// family's Vector layout), as stable-diffusion.cpp computes it.
type clipConditioner struct {
	m   *infer.Model
	fam *infer.Family
}

func init() {
	infer.RegisterConditioner("clip", func(m *infer.Model) (infer.Conditioner, error) {
		if clip.CLIPTokenizer(m) == nil {
			return nil, fmt.Errorf("%s: no CLIP tokenizer", m.Path)
		}
		if n := len(clip.CLIPEncoders(m.Config)); n != len(m.Family.Encoders) {
			return nil, fmt.Errorf("%s: %d text encoders found, %s has %d", m.Path, n, m.Family.Title, len(m.Family.Encoders))
		}
		return &clipConditioner{m: m, fam: m.Family}, nil
	})
}

// chunkLen is the token count of one text-encoder pass: 77, or fewer when an encoder has fewer positions.
func (c *clipConditioner) chunkLen() int {
	n := 77
	for _, t := range clip.CLIPEncoders(c.m.Config) {
		n = min(n, t.Positions)
	}
	return n
}

// Encode conditions on prompt for a width×height image (infer.Conditioner).
func (c *clipConditioner) Encode(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	return c.encodeFor(prompt, width, height, zero, false)
}

// EncodeNegative is encode for the negative prompt (the vector's score parts take their Negative value).
func (c *clipConditioner) EncodeNegative(prompt string, width, height int, zero bool) (*infer.Conditioning, error) {
	return c.encodeFor(prompt, width, height, zero, true)
}

func (c *clipConditioner) encodeFor(prompt string, width, height int, zero, negative bool) (*infer.Conditioning, error) {
	m := c.m
	tok := clip.CLIPTokenizer(m)
	chunk := c.chunkLen()
	encs := clip.CLIPEncoders(m.Config)
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
			clip.ZeroAfterEOS(ids[i], chunk, tok.EOS())
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
	out := &infer.Conditioning{Tokens: n, Dim: dim, Context: make([]float32, n*dim)}
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
				at = clip.FirstEOS(ids[i][:chunk], tok.EOS())
			}
			h, p, err := clip.RunCLIP(m, encs[i], ids[i][lo:lo+chunk], at)
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
		infer.ApplyWeights(ctx, weights[lo:lo+chunk], dim)
		if zero {
			clear(ctx)
		}
	}
	if len(c.fam.Vector) > 0 {
		v, err := conditioningVector(c.fam.Vector, pooled, width, height, negative)
		if err != nil {
			return nil, err
		}
		if u, ok := m.Config.Network.(infer.VectorTaker); ok && u.VectorWidth() != len(v) {
			return nil, fmt.Errorf("%s: the conditioning vector has %d values, the UNet's label_emb takes %d", m.Path, len(v), u.VectorWidth())
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
func conditioningVector(parts []infer.VectorPart, pooled [][]float32, width, height int, negative bool) ([]float32, error) {
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
