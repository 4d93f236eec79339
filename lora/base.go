package lora

import (
	"fmt"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
)

// Base is the tensor list of the model adapters are applied to, indexed by
// the canonical names sd.cpp's conversion gives them, so that a base in any
// naming (an LDM or diffusers checkpoint, a diffusers folder's prefixed
// names, a ComfyUI or BFL Flux file, a Wan file, with or without prefixes)
// matches adapters in any naming.
type Base struct {
	// Version is the model version the names are converted for.
	Version names.Version
	// Prefix is prepended to stored names that lack it before they are
	// converted ("model.diffusion_model." for a bare diffusion-model file).
	Prefix string

	tensors []baseTensor
	canon   map[string]int     // canonical name -> tensor
	groups  map[string][]int   // canonical name without part suffix -> tensors by part
	flat    map[string]flatMap // component prefix -> flattened names
	prefix  map[string]string  // sd.cpp component prefix -> canonical prefix
}

type baseTensor struct {
	name  string
	shape []int64
	canon string
	group string
	part  int
}

// flatMap maps the flattened rest of canonical names ("_" for every ".")
// to the tensor; ambiguous entries (two names flattening alike) map to -1.
type flatMap map[string]int

// NewBase indexes the base model's tensors (their names as stored) for
// version v. prefix is what sd.cpp's loader puts before names that lack it
// ("" for a full checkpoint, "model.diffusion_model." for a diffusion
// model on its own); DetectBase finds both. Two tensors whose names convert
// to the same canonical name are an error, as they would be in sd.cpp.
func NewBase(tensors []formats.Tensor, v names.Version, prefix string) (*Base, error) {
	b := &Base{Version: v, Prefix: prefix, canon: map[string]int{}, groups: map[string][]int{},
		flat: map[string]flatMap{}, prefix: map[string]string{}}
	for i := range tensors {
		t := &tensors[i]
		name := t.Name
		if prefix != "" && !strings.HasPrefix(name, prefix) {
			name = prefix + name
		}
		c := names.Convert(name, v)
		for _, a := range baseAliases {
			if rest, ok := strings.CutPrefix(c, a.from); ok {
				c = a.to + rest
			}
		}
		if j, dup := b.canon[c]; dup {
			return nil, fmt.Errorf("base: tensors %q and %q both stand for %q", b.tensors[j].name, t.Name, c)
		}
		g, part := splitPart(c)
		b.canon[c] = len(b.tensors)
		b.tensors = append(b.tensors, baseTensor{name: t.Name, shape: append([]int64{}, t.Shape...), canon: c, group: g, part: part})
	}
	for i, t := range b.tensors {
		parts := b.groups[t.group]
		for len(parts) <= t.part {
			parts = append(parts, -1)
		}
		parts[t.part] = i
		b.groups[t.group] = parts
	}
	return b, nil
}

// DetectBase finds the version of a base model and the prefix its names
// need: the names as stored, or with "model.diffusion_model." before them
// (a Flux, Wan or other diffusion model saved on its own). The version sd.cpp
// would report comes first; where sd.cpp names none (a UNet without its
// text encoder, a scaled-down test model whose widths it would not read)
// the main family's own sd.cpp version is taken. Both come from the family
// table (family.Detect). It returns names.Unknown when nothing is recognised.
func DetectBase(tensors []formats.Tensor) (names.Version, string) {
	const p = "model.diffusion_model."
	prefixed := make([]formats.Tensor, len(tensors))
	for i, t := range tensors {
		prefixed[i] = t
		if !strings.HasPrefix(t.Name, p) {
			prefixed[i].Name = p + t.Name
		}
	}
	cands := []struct {
		arch   family.Architecture
		prefix string
	}{{family.Detect(tensors, nil), ""}, {family.Detect(prefixed, nil), p}}
	for _, c := range cands {
		if v := names.VersionOf(c.arch); v != names.Unknown {
			return v, c.prefix
		}
	}
	for _, c := range cands {
		if v := names.Lookup(c.arch.SDCppModel()); v != names.Unknown {
			return v, c.prefix
		}
	}
	return names.Unknown, ""
}

// splitPart splits sd.cpp's name of one part of a fused tensor
// ("...img_attn.qkv.weight.1") into the fused name and the part number; any
// other name is part 0 of itself.
func splitPart(c string) (string, int) {
	dot := strings.LastIndexByte(c, '.')
	if dot < 0 || dot == len(c)-1 {
		return c, 0
	}
	n := 0
	for _, ch := range c[dot+1:] {
		if ch < '0' || ch > '9' || n > 1<<20 {
			return c, 0
		}
		n = n*10 + int(ch-'0')
	}
	g := c[:dot]
	if !strings.HasSuffix(g, ".weight") && !strings.HasSuffix(g, ".bias") {
		return c, 0
	}
	return g, n
}

// canonPrefix returns the canonical prefix of a component named by its
// sd.cpp loader prefix ("te1." is "cond_stage_model.transformer." for SDXL,
// "text_encoders.clip_l.transformer." for Flux).
func (b *Base) canonPrefix(comp string) string {
	if p, ok := b.prefix[comp]; ok {
		return p
	}
	const probe = "x.weight"
	p := strings.TrimSuffix(names.Convert(comp+probe, b.Version), probe)
	b.prefix[comp] = p
	return p
}

// flatIndex returns the flattened names of the base tensors under the
// canonical prefix p.
func (b *Base) flatIndex(p string) flatMap {
	if m, ok := b.flat[p]; ok {
		return m
	}
	m := flatMap{}
	for i, t := range b.tensors {
		rest, ok := strings.CutPrefix(t.canon, p)
		if !ok || t.part != 0 {
			continue
		}
		k := strings.ReplaceAll(rest, ".", "_")
		if _, dup := m[k]; dup {
			m[k] = -1
			continue
		}
		m[k] = i
	}
	b.flat[p] = m
	return m
}

// hit is a resolved adapter layer: part part of the base group.
type hit struct {
	group string
	part  int
}

// lookup finds the base group of a canonical name, directly or through an
// alias.
func (b *Base) lookup(c string) (hit, bool) {
	g, part := splitPart(c)
	if _, ok := b.groups[g]; ok {
		return hit{g, part}, true
	}
	if part != 0 {
		return hit{}, false
	}
	for _, a := range aliases {
		if stem, ok := strings.CutSuffix(g, a.from); ok {
			if _, ok := b.groups[stem+a.to]; ok {
				return hit{stem + a.to, a.part}, true
			}
		}
	}
	return hit{}, false
}
