package quantize

import (
	"context"
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// llamaRow returns the source row of output row r of a q or k projection
// with rows rows, permuted for heads heads as llama.cpp's converter does
// for its rotary layout: each head's rows are split into two halves, and
// the output interleaves them (row 2j of a head is its row j, row 2j+1 its
// row half+j). ComfyUI-GGUF's loader undoes exactly this.
func llamaRow(r, rows int64, heads int) int64 {
	per := rows / int64(heads)
	half := per / 2
	h, i := r/per, r%per
	return h*per + (i%2)*half + i/2
}

// permute wraps out's producer so that a llama-architecture text
// encoder's q and k projection rows are written permuted (llama.cpp's
// layout, which ComfyUI-GGUF and llama.cpp's own rotary code expect).
func (b *builder) permute(out *pipeline.Output, source string) error {
	if b.llama == nil || b.llama.PermuteHeads[0] == 0 {
		return nil
	}
	var heads int
	switch {
	case strings.HasSuffix(source, "self_attn.q_proj.weight"):
		heads = b.llama.PermuteHeads[0]
	case strings.HasSuffix(source, "self_attn.k_proj.weight"):
		heads = b.llama.PermuteHeads[1]
	case strings.HasSuffix(source, "self_attn.q_proj.bias"), strings.HasSuffix(source, "self_attn.k_proj.bias"):
		return fmt.Errorf("%s: tensor %q: llama.cpp's q/k row permutation of a bias is not supported (%s has none)", b.opts.Input, source, b.llama.Title)
	default:
		return nil
	}
	rows := out.Shape[0]
	if len(out.Shape) != 2 || rows%int64(2*heads) != 0 {
		return fmt.Errorf("%s: tensor %q: shape %v does not split into %d heads of whole row pairs (llama.cpp's q/k permutation; ComfyUI-GGUF reverses it with %d heads and %d KV heads)",
			b.opts.Input, source, out.Shape, heads, b.llama.PermuteHeads[0], b.llama.PermuteHeads[1])
	}
	out.Producer = &permutedRows{inner: out.Producer, rows: rows, heads: heads}
	out.Note += fmt.Sprintf("; rows permuted for %d heads (llama.cpp's rotary layout)", heads)
	return nil
}

// permutedRows produces a q or k projection's rows in llama.cpp's order,
// one source row at a time from inner.
type permutedRows struct {
	inner pipeline.Producer
	rows  int64
	heads int
}

// Prepare checks that the output is made of the projection's rows and
// prepares inner.
func (p *permutedRows) Prepare(o *pipeline.Output) (int64, error) {
	rows, _, err := o.Rows()
	if err != nil {
		return 0, err
	}
	if rows != p.rows {
		return 0, fmt.Errorf("tensor %q: %s is written in %d units, not its %d rows: its rows cannot be permuted", o.Name, o.Type, rows, p.rows)
	}
	if pr, ok := p.inner.(pipeline.Preparer); ok {
		return pr.Prepare(o)
	}
	return 0, nil
}

// Produce writes rows [first, first+n) of the permuted tensor.
func (p *permutedRows) Produce(ctx context.Context, dst []byte, first, n int64, s *tensor.Scratch) error {
	if n <= 0 {
		return nil
	}
	rb := int64(len(dst)) / n
	for r := range n {
		if err := p.inner.Produce(ctx, dst[r*rb:(r+1)*rb], llamaRow(first+r, p.rows, p.heads), 1, s); err != nil {
			return err
		}
	}
	return nil
}

// Damage reports inner's.
func (p *permutedRows) Damage() pipeline.Damage {
	if d, ok := p.inner.(pipeline.Damaged); ok {
		return d.Damage()
	}
	return pipeline.Damage{}
}

// normShift returns what is added to the tensor called name (its output
// name) for the llama.cpp convention of the text encoder's family: Gemma's
// norm scales, in the language model's layers and its final norm.
func (b *builder) normShift(name string) float32 {
	if b.llama == nil || b.llama.NormShift == 0 || !strings.HasSuffix(name, "norm.weight") {
		return 0
	}
	if strings.HasPrefix(name, "blk.") || name == "output_norm.weight" {
		return b.llama.NormShift
	}
	return 0
}

// shifted returns enc adding shift to every value before encoding.
func shifted(enc pipeline.RowEncoder, shift float32) pipeline.RowEncoder {
	return func(dst []byte, src []float32, rowLen int) error {
		for i := range src {
			src[i] += shift
		}
		return enc(dst, src, rowLen)
	}
}
