package names

import (
	"bytes"
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
	if name == "" {
		return name
	}
	// Most checks below are prefix tests; the first byte rules out most of
	// them at once.
	first := name[0]
	if first == 'i' && strings.HasPrefix(name, "ip_adapter.") || first == 'i' && strings.HasPrefix(name, "image_proj.") {
		return convertIPAdapter(name, v)
	}

	lora := false
	if first == 'l' {
		name, lora = loraPreprocess(name, v)
	}

	top := topOther
	switch {
	case v.IsUNet():
		top = topUNet
	case v.IsFlux():
		top = topFlux
	}
	// Each part converts the name after its prefix. Names already in
	// sd.cpp's form come back as they are, without allocating; a name whose
	// top-level prefix is renamed is built together with its part's edits.
	to, rest, renamed := top.match(name)
	if v == Krea2 {
		// Krea 2's Qwen3-VL vision tower, renamed before the parts are.
		if renamed {
			name, to, rest, renamed = to+rest, "", "", false
		}
		name = convertQwen3VLVision(name, fast)
	}
	switch {
	case renamed && to == diffusionPrefix:
		name = convertDiffusion("", rest, v, fast)
	case renamed && to == firstStagePrefix:
		name = convertFirstStage("", rest, v, fast)
	default:
		if renamed {
			name = to + rest
		}
		name = convertPart(name, v, lora, fast)
	}

	if firstByte(name) == 'p' && strings.HasPrefix(name, "pmid.") {
		if to, ok := photoMakerNames[name]; ok {
			name = to
		}
		if to, ok := photoMakerV2Names[name]; ok {
			name = to
		}
	}

	// ControlNet .pth files wrap the model in "control_model.".
	name = strings.TrimPrefix(name, "control_model.")
	if v.IsSDXL() && hasAnyPrefix(name, controlNetHeads) {
		name = convertControlNetSDXL(name, fast)
	}

	name = genericRules.runString(name, fast)
	if lora {
		name = "lora." + name
	}
	return name
}

// convertPart finds the part of a name that has its final top-level prefix
// and converts it.
func convertPart(name string, v Version, lora, fast bool) string {
	if rest, ok := strings.CutPrefix(name, diffusionPrefix); ok {
		return convertDiffusion(name, rest, v, fast)
	}
	if lora && hasAnyPrefix(name, loraUNetHeads) {
		// A LoRA may name diffusers UNet modules without any prefix.
		return convertDiffusion("", name, v, fast)
	}
	switch firstByte(name) {
	case 'c', 't':
		for _, p := range condPrefixes {
			if rest, ok := strings.CutPrefix(name, p); ok {
				if r := convertTextEncoder(rest, fast); r != rest {
					return p + r
				}
				return name
			}
		}
	case 'f', 'v':
		// sd.cpp also accepts "vae." here, but the top-level renames have
		// turned every "vae." into "first_stage_model." by now.
		if rest, ok := strings.CutPrefix(name, firstStagePrefix); ok {
			return convertFirstStage(name, rest, v, fast)
		}
	}
	return name
}

// convertFirstStage converts a VAE name, full (or "" when not built yet),
// whose part after "first_stage_model." is rest.
func convertFirstStage(full, rest string, v Version, fast bool) string {
	switch {
	case v == HunyuanVideo:
		// sd.cpp leaves Hunyuan's VAE names as they are.
		if full == "" {
			return firstStagePrefix + rest
		}
		return full
	case v.usesTAE():
		// SDXS keeps its tiny autoencoder under "tae.".
		return convertVAE("", "tae.", rest, fast)
	case v.usesWanVAE():
		if r := convertWanVAE(rest, fast); r != rest || full == "" {
			return firstStagePrefix + r
		}
		return full
	}
	return convertVAE(full, firstStagePrefix, rest, fast)
}

// convertWanVAE renames the part of a Wan VAE name after its prefix from
// the diffusers layout to the original flat module lists.
func convertWanVAE(s string, fast bool) string {
	s = wanVAEShared.runString(s, fast)
	s, _ = wanVAEPrefixes.apply(s)
	if strings.Contains(s, ".residual.") {
		s = wanVAEResidual.runString(s, fast)
	}
	return s
}

// convertQwen3VLVision moves a Qwen3-VL vision tower from HF's
// "model.visual." to "visual." and renames llama.cpp GGUF vision names.
func convertQwen3VLVision(name string, fast bool) string {
	if rest, ok := strings.CutPrefix(name, llmVisualHF); ok {
		name = llmVisual + rest
	}
	if !strings.HasPrefix(name, llmVisual) {
		return name
	}
	if strings.Contains(name, "v.deepstack_merger_list.") || strings.Contains(name, "v.deepstack.") {
		return qwen3VLDeepstack.runString(name, fast)
	}
	return qwen3VLVision.runString(name, fast)
}

// firstByte returns s's first byte, 0 for "" (a LoRA name can be empty once
// its wrapper is stripped).
func firstByte(s string) byte {
	if s == "" {
		return 0
	}
	return s[0]
}

func containsAny(s string, subs []string) bool {
	for _, g := range subs {
		if strings.Contains(s, g) {
			return true
		}
	}
	return false
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// convertDiffusion renames a diffusion-model name, full (or "" when not
// built yet), whose part after "model.diffusion_model." is rest, from the
// diffusers layout to the original one.
func convertDiffusion(full, rest string, v Version, fast bool) string {
	var t *prefixTable
	switch {
	case v.IsSD1(), v.IsSD2():
		return sd1UNet.convert(full, diffusionPrefix, rest, fast)
	case v.IsSDXL():
		return sdxlUNet.convert(full, diffusionPrefix, rest, fast)
	case v == SD3:
		t = sd3DiT
	case v.usesFluxDiT():
		t = fluxDiT
	case v == ZImage:
		t = zImageDiT
	case v == Anima && !strings.HasPrefix(rest, animaPrefix):
		return diffusionPrefix + animaPrefix + rest
	case v == Krea2:
		r, _ := krea2Prefixes.apply(rest)
		if r = krea2Names.runString(r, fast); r != rest || full == "" {
			return diffusionPrefix + r
		}
		return full
	case v == HunyuanVideo:
		if r := hunyuanGeneric.runString(hunyuanDiT.apply(rest), fast); r != rest || full == "" {
			return diffusionPrefix + r
		}
		return full
	default:
		if full == "" {
			return diffusionPrefix + rest
		}
		return full
	}
	if r := t.apply(rest); r != rest || full == "" {
		return diffusionPrefix + r
	}
	return full
}

// convert renames full, which is prefix+rest, converting rest.
func (u *unetRules) convert(full, prefix, rest string, fast bool) string {
	// The stem names start with time_embedding., conv_ or add_embedding.
	if rest != "" && (rest[0] == 't' || rest[0] == 'c' || rest[0] == 'a' || !fast) {
		if to, ok := u.stem[rest]; ok {
			return prefix + to
		}
	}
	resnet := strings.Contains(rest, "resnets")
	if !fast {
		s := rest
		if resnet {
			s = unetResnet.apply(s)
		}
		s = unetTail.apply(u.blocks.apply(s))
		return prefix + s
	}
	var e editor
	e.load(prefix, rest)
	if resnet {
		e.run(&unetResnet)
	}
	e.run(&u.blocks)
	e.run(&unetTail)
	return e.result(full)
}

// runString applies r to s, through an editor when fast.
func (r *substRules) runString(s string, fast bool) string {
	if !fast {
		return r.apply(s)
	}
	// Most names fail a "contains" guard; test it before copying the name.
	if !r.blocks && len(r.guards) > 0 && !containsAny(s, r.guards) {
		return s
	}
	var e editor
	e.load("", s)
	e.run(r)
	return e.result(s)
}

// convertTextEncoder renames the part of a text-encoder name after its
// prefix: llama.cpp GGUF T5 and LLM names to HF names, open_clip to HF CLIP.
func convertTextEncoder(s string, fast bool) string {
	switch {
	case strings.Contains(s, "t5xxl"):
		return t5Rules.runString(s, fast)
	case strings.Contains(s, "llm.visual"):
		return llmVisionRules.runString(s, fast)
	case strings.Contains(s, "llm"):
		s = llmRules.runString(s, fast)
		s = lladaRules.runString(s, fast)
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
	return clipProjections.runString(s, fast)
}

// convertVAE renames full, which is prefix+rest, converting rest from the
// diffusers VAE layout to LDM's.
func convertVAE(full, prefix, rest string, fast bool) string {
	if r, ok := vaeOuterPrefixes.apply(rest); ok {
		rest, full = r, ""
	}
	hadAttentions := strings.Contains(rest, "attentions")
	if !fast {
		s := vaeBlockRules.apply(vaeBase.apply(rest))
		if hadAttentions {
			s = vaeAttnOld.apply(s)
		}
		if strings.Contains(s, "mid.attn_1.") {
			s = vaeAttnNew.apply(s)
		}
		return prefix + s
	}
	var e editor
	e.load(prefix, rest)
	e.run(&vaeBase)
	e.run(&vaeBlockRules)
	if hadAttentions {
		e.run(&vaeAttnOld)
	}
	if bytes.Contains(e.text(), midAttn) {
		e.run(&vaeAttnNew)
	}
	return e.result(full)
}

var midAttn = []byte("mid.attn_1.")

// convertControlNetSDXL renames a bare diffusers SDXL ControlNet (or UNet)
// name: the shared encoder like the UNet, then the ControlNet-only parts.
func convertControlNetSDXL(s string, fast bool) string {
	s = sdxlUNet.convert(s, "", s, fast)
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
