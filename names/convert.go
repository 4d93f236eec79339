package names

import (
	"fmt"
	"strings"
)

// Convert returns the name stable-diffusion.cpp gives the tensor called name
// in a model of version v: the name --convert-name stores and the key sd.cpp
// looks imatrix entries up by. Names of a scheme it does not recognise are
// returned unchanged.
func Convert(name string, v Version) string { return convert(name, v, true) }

// convert is Convert; fast false disables the guards that let rule lists be
// skipped, so tests can check that the skips never change a result.
func convert(name string, v Version, fast bool) string {
	if strings.HasPrefix(name, "ip_adapter.") || strings.HasPrefix(name, "image_proj.") {
		return convertIPAdapter(name, v)
	}

	name, lora := loraPreprocess(name, v)

	top := topOther
	switch {
	case v.IsUNet():
		top = topUNet
	case v.IsFlux():
		top = topFlux
	}
	name, _ = top.apply(name)

	if strings.HasPrefix(name, diffusionPrefix) {
		name = diffusionPrefix + convertDiffusion(name[len(diffusionPrefix):], v, fast)
	} else if lora && hasAnyPrefix(name, loraUNetHeads) {
		// A LoRA may name diffusers UNet modules without any prefix.
		name = diffusionPrefix + convertDiffusion(name, v, fast)
	}

	for _, p := range condPrefixes {
		if strings.HasPrefix(name, p) {
			name = p + convertTextEncoder(name[len(p):], fast)
			break
		}
	}

	for _, p := range firstStagePrefixes {
		if strings.HasPrefix(name, p) {
			rest := convertVAE(name[len(p):], fast)
			if v.usesTAE() {
				p = "tae."
			}
			name = p + rest
			break
		}
	}

	// ControlNet .pth files wrap the model in "control_model.".
	name = strings.TrimPrefix(name, "control_model.")
	if v.IsSDXL() && hasAnyPrefix(name, controlNetHeads) {
		name = convertControlNetSDXL(name, fast)
	}

	name = genericRules.apply(name, fast)
	if lora {
		name = "lora." + name
	}
	return name
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// convertDiffusion renames the part of a diffusion-model name after
// "model.diffusion_model." from the diffusers layout to the original one.
func convertDiffusion(s string, v Version, fast bool) string {
	switch {
	case v.IsSD1(), v.IsSD2():
		return sd1UNet.convert(s, fast)
	case v.IsSDXL():
		return sdxlUNet.convert(s, fast)
	case v == SD3:
		return sd3DiT.apply(s)
	case v.usesFluxDiT():
		return fluxDiT.apply(s)
	}
	return s
}

func (u *unetRules) convert(s string, fast bool) string {
	if to, ok := u.stem[s]; ok {
		return to
	}
	if strings.Contains(s, "resnets") {
		s = unetResnet.apply(s, fast)
	}
	s = u.blocks.apply(s, fast)
	return unetTail.apply(s, fast)
}

// convertTextEncoder renames the part of a text-encoder name after its
// prefix: llama.cpp GGUF T5 and LLM names to HF names, open_clip to HF CLIP.
func convertTextEncoder(s string, fast bool) string {
	switch {
	case strings.Contains(s, "t5xxl"):
		return t5Rules.apply(s, fast)
	case strings.Contains(s, "llm.visual"):
		return llmVisionRules.apply(s, fast)
	case strings.Contains(s, "llm"):
		s = llmRules.apply(s, fast)
		s = lladaRules.apply(s, fast)
		for _, suf := range bareExpertSuffixes {
			if strings.HasSuffix(s, suf) {
				return s + ".weight"
			}
		}
		return s
	}
	if to, ok := openCLIPWhole[s]; ok {
		s = to
	}
	for _, tower := range openCLIPTowers {
		if rest, ok := strings.CutPrefix(s, tower.from); ok {
			// rest is "N.<inner name>"; a name without the inner part is
			// left alone (sd.cpp throws out_of_range on it).
			if dot := strings.IndexByte(rest, '.'); dot >= 0 {
				if inner, ok := openCLIPBlock[rest[dot+1:]]; ok {
					s = tower.to + rest[:dot+1] + inner
				}
			}
		}
	}
	return clipProjections.apply(s, fast)
}

// convertVAE renames the part of a VAE name after its prefix from the
// diffusers layout to LDM's.
func convertVAE(s string, fast bool) string {
	s, _ = vaeOuterPrefixes.apply(s)
	hadAttentions := strings.Contains(s, "attentions")
	s = vaeBase.apply(s, fast)
	s = vaeBlockRules.apply(s, fast)
	if hadAttentions {
		s = vaeAttnOld.apply(s, fast)
	}
	if strings.Contains(s, "mid.attn_1.") {
		s = vaeAttnNew.apply(s, fast)
	}
	return s
}

// convertControlNetSDXL renames a bare diffusers SDXL ControlNet (or UNet)
// name: the shared encoder like the UNet, then the ControlNet-only parts.
func convertControlNetSDXL(s string, fast bool) string {
	s = sdxlUNet.convert(s, fast)
	if to, ok := controlNetPrefixes.apply(s); ok {
		return to
	}
	if rest, ok := strings.CutPrefix(s, "controlnet_down_blocks."); ok {
		if dot := strings.IndexByte(rest, '.'); dot >= 0 {
			return "zero_convs." + rest[:dot] + ".0" + rest[dot:]
		}
	}
	return s
}

// convertIPAdapter renames IP-Adapter weights: the image projection moves
// under "ip_adapter.", and "ip_adapter.N.<param>.<kind>" becomes the cross
// attention of the transformer block that adapter N extends.
func convertIPAdapter(name string, v Version) string {
	if strings.HasPrefix(name, "image_proj.") {
		return "ip_adapter." + name
	}
	items := strings.Split(name, ".")
	if len(items) < 4 {
		return name
	}
	blocks := ipAdapterSD15
	if v.IsSDXL() {
		blocks = ipAdapterSDXL
	}
	blk, ok := blocks[atoi(items[1])]
	if !ok {
		return name
	}
	// Like sd.cpp, only the two segments after the index are kept.
	return diffusionPrefix + blk + ".attn2." + items[2] + "." + items[3]
}

// atoi parses like C's atoi: optional leading spaces and sign, then digits up
// to the first non-digit; no digits give 0. Values are clamped rather than
// overflowing.
func atoi(s string) int {
	i := 0
	for i < len(s) && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	n := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if n < 1<<31 {
			n = n*10 + int(s[i]-'0')
		}
	}
	if neg {
		return -n
	}
	return n
}

// loraPreprocess strips the LoRA wrapper sd.cpp's LoRA loader puts around a
// name, normalises the weight suffix and the "_" separators of kohya names,
// and reports whether name was a LoRA name ("lora." is put back at the end).
func loraPreprocess(name string, v Version) (string, bool) {
	wrapper := ""
	for _, w := range loraWrappers {
		if strings.HasPrefix(name, w) {
			wrapper = w
			break
		}
	}
	if wrapper == "" {
		return name, false
	}
	name = name[len(wrapper):]
	underscores := strings.Contains(wrapper, "lycoris_") || hasAnyPrefix(name, loraUnderscoreParts)
	for _, s := range loraSuffixes {
		if strings.HasSuffix(name, s.from) {
			name = name[:len(name)-len(s.from)] + s.to
			break
		}
	}
	if i := strings.Index(name, ".processor"); i >= 0 {
		name = name[:i] + name[i+len(".processor"):]
	}
	if hasAnyPrefix(name, loraDiTHeads) {
		name = "transformer." + name
	}
	if v.IsUNet() || underscores {
		name = underscoresToDots(name)
	}
	return name, true
}

// underscoresToDots turns every "_" of a kohya-style name into "." except
// those inside an occurrence of a known multi-word module name.
func underscoresToDots(s string) string {
	if strings.IndexByte(s, '_') < 0 {
		return s
	}
	keep := make([]bool, len(s))
	for _, w := range loraKeepWords {
		for start := 0; ; {
			i := strings.Index(s[start:], w)
			if i < 0 {
				break
			}
			i += start
			for k := 0; k < len(w); k++ {
				if w[k] == '_' {
					keep[i+k] = true
				}
			}
			start = i + len(w)
		}
	}
	b := []byte(s)
	for i, c := range b {
		if c == '_' && !keep[i] {
			b[i] = '.'
		}
	}
	return string(b)
}

// CollisionError reports two tensors whose converted names are the same.
type CollisionError struct {
	// First and Second are the original names, in input order.
	First, Second string
	// Converted is the name both convert to.
	Converted string
}

// Error says which two tensors collide and on what name.
func (e *CollisionError) Error() string {
	if e.First == e.Second {
		return fmt.Sprintf("names: tensor %q is listed twice", e.First)
	}
	return fmt.Sprintf("names: tensors %q and %q both convert to %q", e.First, e.Second, e.Converted)
}

// ConvertAll converts every name with Convert, keeping their order. When two
// names convert to the same name (or a name repeats), it returns a
// *CollisionError naming the first such pair and no names, because sd.cpp
// would silently keep only one of the tensors.
func ConvertAll(names []string, v Version) ([]string, error) {
	out := make([]string, len(names))
	seen := make(map[string]int, len(names))
	for i, n := range names {
		c := Convert(n, v)
		if j, dup := seen[c]; dup {
			return nil, &CollisionError{First: names[j], Second: n, Converted: c}
		}
		seen[c] = i
		out[i] = c
	}
	return out, nil
}
