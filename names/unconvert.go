package names

import "strings"

// DiffusersUNetName returns the diffusers name of an original (LDM) UNet
// tensor of a model of version v: ldm is the name after
// "model.diffusion_model." ("input_blocks.1.1.proj_in.weight") and the result
// the name after "unet." ("down_blocks.0.attentions.0.proj_in.weight"), the
// one whose Convert is ldm again. ok is false for a version that is not a
// UNet and for a name no diffusers name converts to (SDXL's label_emb has
// one, SD 1.x's does not).
//
// It inverts the same tables Convert uses. Those tables also map diffusers
// blocks that no real model has onto real LDM prefixes (SD 1.x's
// up_blocks.0 has no attentions, yet "up_blocks.0.attentions.2." and
// "up_blocks.0.upsamplers.0." both become "output_blocks.2.1."), so only
// names inside the real block structure, naming a child that kind of block
// has, are candidates.
func DiffusersUNetName(ldm string, v Version) (string, bool) {
	var u *unetRules
	var fixups []pair
	var real diffusersLayout
	switch {
	case v.IsSD1(), v.IsSD2():
		u, fixups, real = sd1UNet, sd1Layout.fixups, sd1RealUNet
	case v.IsSDXL():
		u, fixups, real = sdxlUNet, sdxlLayout.fixups, sdxlRealUNet
	default:
		return "", false
	}
	want := diffusionPrefix + ldm
	for from, to := range u.stem {
		if to == ldm {
			return from, true
		}
	}
	// The rename lists run forward in order; the fix-ups rename what the
	// block rules produced, so they are undone first. Both the fixed-up and
	// the plain form are tried, because a fix-up's target can also be a name
	// of its own.
	forms := []string{ldm}
	for _, f := range fixups {
		if strings.HasPrefix(ldm, f.to) {
			forms = append(forms, f.from+ldm[len(f.to):])
		}
	}
	for _, s := range forms {
		for _, r := range u.blocks.rules {
			if !strings.HasPrefix(s, r.to) || !hasAnyPrefix(r.from, diffusersBlockHeads) {
				continue
			}
			cand := r.from + s[len(r.to):]
			if strings.Contains(cand, "resnets") {
				cand = unrename(cand, unetResnet.rules)
			}
			if !real.fits(cand) {
				continue
			}
			if Convert("unet."+cand, v) == want {
				return cand, true
			}
		}
	}
	return "", false
}

// diffusersBlockHeads are the names the block rules start from; the
// fix-ups in the same list start from LDM names.
var diffusersBlockHeads = []string{"down_blocks.", "up_blocks.", "mid_block."}

// unrename undoes each rename of rules once, last rule first, the way
// substRules.apply did them.
func unrename(s string, rules []pair) string {
	for k := len(rules) - 1; k >= 0; k-- {
		p := rules[k]
		if i := strings.Index(s, p.to); i >= 0 {
			s = s[:i] + p.from + s[i+len(p.to):]
		}
	}
	return s
}

// diffusersLevel is what one level of a real diffusers UNet holds.
type diffusersLevel struct {
	resnets, attentions int
	sampler             bool
}

// diffusersLayout is the block structure of the real diffusers UNets: the
// rename lists also cover blocks no model has (SDXL's fourth up resnet, SD
// 1.x's up attentions at level 0), whose names convert onto real ones.
type diffusersLayout struct{ down, up []diffusersLevel }

var (
	sd1RealUNet = diffusersLayout{
		down: []diffusersLevel{{2, 2, true}, {2, 2, true}, {2, 2, true}, {2, 0, false}},
		up:   []diffusersLevel{{3, 0, true}, {3, 3, true}, {3, 3, true}, {3, 3, false}},
	}
	sdxlRealUNet = diffusersLayout{
		down: []diffusersLevel{{2, 0, true}, {2, 2, true}, {2, 2, false}},
		up:   []diffusersLevel{{3, 3, true}, {3, 3, true}, {3, 0, false}},
	}
)

// diffusersChildren lists, per kind of diffusers UNet block, the names its
// children start with.
var diffusersChildren = map[string][]string{
	"attentions":   {"norm.", "proj_in.", "proj_out.", "transformer_blocks."},
	"resnets":      {"norm1.", "conv1.", "norm2.", "conv2.", "time_emb_proj.", "conv_shortcut."},
	"upsamplers":   {"conv."},
	"downsamplers": {"conv."},
}

// fits reports whether name ("up_blocks.1.attentions.2.proj_in.weight") is
// inside a block the layout has and names a child that kind of block has.
func (l diffusersLayout) fits(name string) bool {
	var lv diffusersLevel
	var block string
	switch head, rest, _ := strings.Cut(name, "."); head {
	case "mid_block":
		lv, block = diffusersLevel{resnets: 2, attentions: 1}, rest
	case "down_blocks", "up_blocks":
		levels := l.down
		if head == "up_blocks" {
			levels = l.up
		}
		level, r, _ := strings.Cut(rest, ".")
		i, ok := index(level)
		if !ok || i >= len(levels) {
			return false
		}
		lv, block = levels[i], r
	default:
		return true // not inside a block: the stem
	}
	kind, r, _ := strings.Cut(block, ".")
	idx, child, _ := strings.Cut(r, ".")
	j, ok := index(idx)
	if !ok {
		return false
	}
	switch kind {
	case "resnets":
		ok = j < lv.resnets
	case "attentions":
		ok = j < lv.attentions
	case "upsamplers", "downsamplers":
		ok = lv.sampler && j == 0
	default:
		ok = false
	}
	return ok && hasAnyPrefix(child, diffusersChildren[kind])
}

// index parses a block index written the way module lists number them.
func index(s string) (int, bool) {
	i := atoi(s)
	return i, i >= 0 && itoa(i) == s
}
