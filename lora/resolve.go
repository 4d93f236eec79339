package lora

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/names"
)

// resolve finds the base tensor group a layer changes. It tries, in order:
// the name spelled out with the component prefix its head implies (and the
// alternative spellings of renameSets); sd.cpp's own conversion of LoRA
// names; for kohya-style flattened names, the base names flattened the
// same way, then every placement of "." for "_" that names a base tensor.
// A candidate counts only if it names a tensor of the base, so no guess can
// match something that is not there. An error says why nothing matched.
func (b *Base) resolve(l *Layer) (hit, error) {
	param := "weight"
	if l.Bias {
		param = "bias"
	}
	module := l.Module
	h, rest := findHead(module)
	if h.prefix == "base_model.model." {
		// PEFT wraps the model once more; what follows is a name of its own.
		module = rest
		h, rest = findHead(module)
	}
	if !h.flat {
		// A name already in sd.cpp's form ("...qkv.weight.1") is looked up
		// as it is.
		if r, ok := b.lookup(rest); ok {
			return r, nil
		}
		comps := []string{h.comp}
		if h.comp == "" {
			comps = bareComps
		}
		for _, comp := range comps {
			if r, ok := b.tryDotted(comp+rest, param); ok {
				return r, nil
			}
		}
		if r, ok := b.trySDCpp(module, param); ok {
			return r, nil
		}
		return hit{}, fmt.Errorf("no tensor of the base is named like it")
	}
	flat := strings.ReplaceAll(rest, ".", "_")
	for changed := true; changed; {
		changed = false
		for _, n := range flatNoise {
			if r, ok := strings.CutPrefix(flat, n); ok && r != "" {
				flat, changed = r, true
			}
		}
	}
	if i, ok := b.flatIndex(b.canonPrefix(h.comp))[flat+"_"+param]; ok && i >= 0 {
		t := b.tensors[i]
		return hit{t.group, t.part}, nil
	}
	if r, ok := b.trySDCpp(module, param); ok {
		return r, nil
	}
	return b.enumerate(h.comp, flat, param)
}

func findHead(module string) (head, string) {
	for _, h := range heads {
		if rest, ok := strings.CutPrefix(module, h.prefix); ok {
			return h, rest
		}
	}
	return head{}, module
}

// tryDotted converts a dotted module name (as it is, then in each
// alternative spelling) and looks the result up.
func (b *Base) tryDotted(dotted, param string) (hit, bool) {
	if r, ok := b.lookup(names.Convert(dotted+"."+param, b.Version)); ok {
		return r, true
	}
	for _, set := range renameSets {
		s := dotted + "."
		for _, rn := range set {
			if i := strings.Index(s, rn.from); i >= 0 {
				s = s[:i] + rn.to + s[i+len(rn.from):]
			}
		}
		if s = strings.TrimSuffix(s, "."); s == dotted {
			continue
		}
		if r, ok := b.lookup(names.Convert(s+"."+param, b.Version)); ok {
			return r, true
		}
	}
	return hit{}, false
}

// trySDCpp resolves the module the way sd.cpp's LoRA loader does: the key
// with a known suffix, converted as a LoRA tensor name.
func (b *Base) trySDCpp(module, param string) (hit, bool) {
	probe, kind := ".lora_down.weight", ".lora_down"
	if param == "bias" {
		probe, kind = ".diff_b", ".diff"
	}
	c := names.Convert("lora."+module+probe, b.Version)
	c, ok := strings.CutPrefix(c, "lora.")
	if !ok {
		return hit{}, false
	}
	if c, ok = strings.CutSuffix(c, kind); !ok {
		return hit{}, false
	}
	return b.lookup(c)
}

// enumerate tries every placement of "." for the "_" of a flattened name.
// More than one distinct base tensor is an error: the name is ambiguous.
func (b *Base) enumerate(comp, flat, param string) (hit, error) {
	var us []int
	for i := 0; i < len(flat); i++ {
		if flat[i] == '_' {
			us = append(us, i)
		}
	}
	if 1<<len(us) > maxEnumerate {
		return hit{}, fmt.Errorf("no tensor of the base is named like it (too many \"_\" to try every reading)")
	}
	found := map[hit]string{}
	buf := []byte(flat)
	for mask := 0; mask < 1<<len(us); mask++ {
		for k, i := range us {
			if mask&(1<<k) != 0 {
				buf[i] = '.'
			} else {
				buf[i] = '_'
			}
		}
		cand := string(buf)
		if r, ok := b.tryDotted(comp+cand, param); ok {
			if _, seen := found[r]; !seen {
				found[r] = cand
			}
		}
	}
	switch len(found) {
	case 0:
		return hit{}, fmt.Errorf("no tensor of the base is named like it")
	case 1:
		for r := range found {
			return r, nil
		}
	}
	var c []string
	for r := range found {
		c = append(c, fmt.Sprintf("%s (part %d)", r.group, r.part))
	}
	sort.Strings(c)
	return hit{}, fmt.Errorf("ambiguous: it reads as any of %s", strings.Join(c, ", "))
}
