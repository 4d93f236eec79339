package clip

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
)

// A CLIP text encoder's configuration (CLIP-L, OpenCLIP-H and bigG),
// detected from its shapes and the metadata overrides.

// Metadata keys of the CLIP text encoders that detection from shapes
// cannot tell (sdtool.clip.* for CLIP-L, sdtool.<component>.* for the
// others: encoderMetaKey).
const (
	// MetaCLIPHeads is the text encoder's head count (default: hidden/64).
	MetaCLIPHeads = "sdtool.clip.num_heads"
	// MetaCLIPAct is the text encoder's MLP activation, "quick_gelu" (CLIP-L) or "gelu" (OpenCLIP-H).
	MetaCLIPAct = "sdtool.clip.hidden_act"
	// MetaCLIPSkip selects the text encoder layer: 1 the last (SD 1.x), 2 the penultimate (SD 2.x).
	MetaCLIPSkip = "sdtool.clip.skip"
)

// CLIPConfig is a CLIP text encoder's configuration.
type CLIPConfig struct {
	// Component is the sd-cli flag of its standalone file ("clip_l", "clip_g").
	Component string
	// Prefix is where its weights live among the internal names.
	Prefix string
	// Hidden, FF, Layers, Vocab and Positions are the transformer's sizes.
	Hidden, FF, Layers, Vocab, Positions int
	// Heads is the attention head count.
	Heads int
	// QuickGELU selects x·sigmoid(1.702x) (CLIP-L) over GELU (OpenCLIP).
	QuickGELU bool
	// Skip is 1 for the last layer's output, 2 for the penultimate.
	Skip int
	// FinalNorm applies the final layer norm to the selected layer's output.
	FinalNorm bool
	// FusedQKV reports OpenCLIP's in_proj (one [3h, h] weight) instead of q/k/v projections.
	FusedQKV bool
	// PadID is the token that pads prompts (EOS for CLIP-L, 0 for OpenCLIP in SD 2.x).
	PadID int
	// Projection is the width of text_projection's output (0: no projection, the pooled output is the hidden state).
	Projection int
}

// encoderMetaKey returns the metadata key of a text-encoder override: the
// sdtool.clip.* keys for CLIP-L (the only encoder of SD 1.x/2.x) and
// sdtool.<component>.* for the others ("sdtool.clip_g.num_heads").
func encoderMetaKey(component, key string) string {
	if component == "clip_l" {
		return key
	}
	return "sdtool." + component + strings.TrimPrefix(key, "sdtool.clip")
}

// detectCLIP reads a CLIP text encoder's configuration under e.Prefix.
func detectCLIP(s infer.Shapes, md formats.Metadata, e *infer.TextEncoder) (infer.EncoderConfig, error) {
	c := &CLIPConfig{Component: e.Component, Prefix: e.Prefix, FinalNorm: e.FinalNorm}
	p := e.Prefix
	var err error
	if c.Vocab, err = s.Dim(p+"embeddings.token_embedding.weight", 0); err != nil {
		return nil, err
	}
	if c.Hidden, err = s.Dim(p+"embeddings.token_embedding.weight", 1); err != nil {
		return nil, err
	}
	if c.Positions, err = s.Dim(p+"embeddings.position_embedding.weight", 0); err != nil {
		return nil, err
	}
	for s.Has(fmt.Sprintf("%sencoder.layers.%d.layer_norm1.weight", p, c.Layers)) {
		c.Layers++
	}
	if c.Layers == 0 {
		return nil, fmt.Errorf("no layers under %sencoder.layers", p)
	}
	if c.FF, err = s.Dim(p+"encoder.layers.0.mlp.fc1.weight", 0); err != nil {
		return nil, err
	}
	c.FusedQKV = s.Has(p + "encoder.layers.0.self_attn.in_proj.weight")
	c.Heads = max(c.Hidden/64, 1)
	if h, ok, err := infer.MetaInt(md, encoderMetaKey(e.Component, MetaCLIPHeads)); err != nil {
		return nil, err
	} else if ok {
		c.Heads = h
	}
	if c.Hidden%c.Heads != 0 {
		return nil, fmt.Errorf("%d channels do not split into %d heads", c.Hidden, c.Heads)
	}
	c.QuickGELU = !e.GELU
	if a, ok := md.String(encoderMetaKey(e.Component, MetaCLIPAct)); ok {
		switch a {
		case "quick_gelu":
			c.QuickGELU = true
		case "gelu":
			c.QuickGELU = false
		default:
			return nil, fmt.Errorf("metadata %s = %q (want quick_gelu or gelu)", MetaCLIPAct, a)
		}
	}
	c.Skip = e.Skip
	c.PadID = 0
	if e.PadEOS {
		c.PadID = -1 // EOS
	}
	if k, ok, err := infer.MetaInt(md, encoderMetaKey(e.Component, MetaCLIPSkip)); err != nil {
		return nil, err
	} else if ok {
		c.Skip = k
	}
	if c.Skip < 1 || c.Skip > c.Layers {
		return nil, fmt.Errorf("clip skip %d with %d layers", c.Skip, c.Layers)
	}
	if e.Pooled && !e.NoProjection {
		if sh, ok := s[p+"text_projection"]; ok {
			if len(sh) != 2 || sh[1] != int64(c.Hidden) {
				return nil, fmt.Errorf("text_projection has shape %v, want [out, %d]", sh, c.Hidden)
			}
			c.Projection = int(sh[0])
		}
	}
	return c, nil
}
