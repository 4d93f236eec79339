package names

import (
	"regexp"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Component kinds.
const (
	KindDiffusion   = "diffusion"
	KindTextEncoder = "text_encoder"
	KindVAE         = "vae"
)

// Component is one recognised part of a checkpoint.
type Component struct {
	// Name is the architecture of the part: sd1, sd2, sdxl, sd3, flux, wan,
	// qwen_image, z_image for diffusion models; clip_l, clip_g, clip_h,
	// clip, t5xxl, t5, llm for text encoders; vae.
	Name string `json:"name"`
	// Kind is "diffusion", "text_encoder" or "vae".
	Kind string `json:"kind"`
	// Variant refines Name when the tensors tell ("dev", "refiner", "umt5",
	// "qwen3", "16ch", "diffusers"); empty otherwise.
	Variant string `json:"variant"`
	// Prefix is the name prefix the part's tensors share ("" for none).
	Prefix string `json:"prefix"`
	// Tensors, Params and Bytes count the tensors under Prefix.
	Tensors int   `json:"tensors"`
	Params  int64 `json:"params"`
	Bytes   int64 `json:"bytes"`
}

// Architecture is the result of detection.
type Architecture struct {
	// Name is the diffusion model's architecture, or the only component's
	// name when there is no diffusion model, or "unknown".
	Name string `json:"name"`
	// Components lists the recognised parts in file order of their prefixes.
	Components []Component `json:"components"`
	// Unassigned counts tensors under no recognised component.
	Unassigned int `json:"unassigned_tensors"`
}

// cond is one test of a detection rule: some tensor whose name (without the
// component prefix) matches re, with the given rank and dims, exists; or,
// when absent is set, none does.
type cond struct {
	re     *regexp.Regexp
	ndim   int     // 0: any rank
	dims   []int64 // nil: any; -1 entries match any size
	absent bool
}

func has(re string) cond { return cond{re: regexp.MustCompile(re)} }

func lacks(re string) cond { return cond{re: regexp.MustCompile(re), absent: true} }

func rank(re string, n int) cond { return cond{re: regexp.MustCompile(re), ndim: n} }

func shape(re string, dims ...int64) cond {
	return cond{re: regexp.MustCompile(re), ndim: len(dims), dims: dims}
}

// rule recognises one architecture (and variant) from its conditions; when
// several rules of a kind match, the one with the most conditions wins, so
// more specific rows refine general ones.
type rule struct {
	name, kind, variant string
	conds               []cond
}

// Tensor-name regexps shared by several rows.
const (
	ldmAttnKV   = `^input_blocks\.\d+\.1\.transformer_blocks\.0\.attn2\.to_k\.weight$`
	ldmProjIn   = `^input_blocks\.1\.1\.proj_in\.weight$`
	ldmLabelEmb = `^label_emb\.`
	dfAttnKV    = `^down_blocks\.\d+\.attentions\.0\.transformer_blocks\.0\.attn2\.to_k\.weight$`
	dfProjIn    = `^down_blocks\.0\.attentions\.0\.proj_in\.weight$`
	dfAddEmb    = `^add_embedding\.`
	hfClipTok   = `^text_model\.embeddings\.token_embedding\.weight$`
	hfClipLayer = `^text_model\.encoder\.layers\.\d+\.`
	ocClipTok   = `^token_embedding\.weight$`
	ocClipLayer = `^transformer\.resblocks\.\d+\.`
	t5Layer     = `^encoder\.block\.\d+\.layer\.0\.SelfAttention\.q\.weight$`
	t5Embed     = `^(shared|encoder\.embed_tokens)\.weight$`
	llmLayer    = `^(model\.)?(language_model\.)?layers\.\d+\.self_attn\.q_proj\.weight$`
	llmEmbed    = `^(model\.)?(language_model\.)?embed_tokens\.weight$`
	ggufLLM     = `^blk\.\d+\.attn_q\.weight$`
	ldmVAE      = `^decoder\.(up\.\d+\.block\.\d+|mid\.block_1)\.`
	dfVAE       = `^decoder\.(up_blocks\.\d+\.resnets|mid_block\.resnets)\.`
	wanVAE      = `^(en|de)coder\.(down|up)samples\.\d+\.`
)

// rules is the detection table. Facts: SD1's UNet uses 1x1-conv proj_in
// and context 768; SD2 linear proj_in and context 1024; SDXL has label_emb,
// depth-10 transformers at input_blocks.7/8 and context 2048 (the refiner
// 1280); SD3 has joint_blocks; Flux double_blocks and single_blocks; Wan
// blocks.N.self_attn and a 5-D Conv3d patch_embedding; Qwen-Image
// transformer_blocks.N.img_mod; Z-Image (Lumina 2 family) noise_refiner,
// context_refiner and layers.
var rules = []rule{
	// LDM (CompVis/SGM) UNets.
	{"sd1", KindDiffusion, "", []cond{rank(ldmProjIn, 4), lacks(ldmLabelEmb)}},
	{"sd1", KindDiffusion, "", []cond{rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768)}},
	{"sd1", KindDiffusion, "inpaint", []cond{rank(ldmProjIn, 4), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 768),
		shape(`^input_blocks\.0\.0\.weight$`, -1, 9, -1, -1)}},
	{"sd2", KindDiffusion, "", []cond{rank(ldmProjIn, 2), lacks(ldmLabelEmb), shape(ldmAttnKV, -1, 1024)}},
	{"sdxl", KindDiffusion, "", []cond{has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`)}},
	{"sdxl", KindDiffusion, "", []cond{has(ldmLabelEmb), has(`^input_blocks\.[78]\.1\.transformer_blocks\.9\.`),
		shape(ldmAttnKV, -1, 2048)}},
	{"sdxl", KindDiffusion, "refiner", []cond{has(ldmLabelEmb), has(`^input_blocks\.\d+\.1\.transformer_blocks\.`),
		shape(ldmAttnKV, -1, 1280)}},
	// Diffusers UNets.
	{"sd1", KindDiffusion, "diffusers", []cond{rank(dfProjIn, 4), lacks(dfAddEmb), shape(dfAttnKV, -1, 768)}},
	{"sd2", KindDiffusion, "diffusers", []cond{rank(dfProjIn, 2), lacks(dfAddEmb), shape(dfAttnKV, -1, 1024)}},
	{"sdxl", KindDiffusion, "diffusers", []cond{has(dfAddEmb), has(`^down_blocks\.\d+\.attentions\.`), shape(dfAttnKV, -1, 2048)}},
	// DiTs.
	{"sd3", KindDiffusion, "", []cond{has(`^joint_blocks\.\d+\.context_block\.`), has(`^joint_blocks\.\d+\.x_block\.`)}},
	{"sd3", KindDiffusion, "diffusers", []cond{has(`^transformer_blocks\.\d+\.ff_context\.`), has(`^pos_embed\.proj\.weight$`),
		lacks(`^single_transformer_blocks\.`), lacks(`\.img_mod\.`)}},
	{"flux", KindDiffusion, "dev", []cond{has(`^double_blocks\.\d+\.img_attn\.`), has(`^single_blocks\.\d+\.`), has(`^guidance_in\.`)}},
	{"flux", KindDiffusion, "schnell", []cond{has(`^double_blocks\.\d+\.img_attn\.`), has(`^single_blocks\.\d+\.`),
		lacks(`^guidance_in\.`), lacks(`^distilled_guidance_layer\.`), lacks(`^double_stream_modulation_img\.`)}},
	{"flux", KindDiffusion, "chroma", []cond{has(`^double_blocks\.\d+\.img_attn\.`), has(`^single_blocks\.\d+\.`),
		has(`^distilled_guidance_layer\.`), lacks(`^guidance_in\.`)}},
	{"flux", KindDiffusion, "flux2", []cond{has(`^double_blocks\.\d+\.img_attn\.`), has(`^single_blocks\.\d+\.`),
		has(`^double_stream_modulation_img\.`), has(`^single_stream_modulation\.`)}},
	{"flux", KindDiffusion, "diffusers", []cond{has(`^transformer_blocks\.\d+\.attn\.add_q_proj\.`), has(`^single_transformer_blocks\.\d+\.`)}},
	{"wan", KindDiffusion, "", []cond{has(`^blocks\.\d+\.self_attn\.q\.weight$`), rank(`^patch_embedding\.weight$`, 5)}},
	{"wan", KindDiffusion, "i2v", []cond{has(`^blocks\.\d+\.self_attn\.q\.weight$`), rank(`^patch_embedding\.weight$`, 5), has(`^img_emb\.`)}},
	{"wan", KindDiffusion, "diffusers", []cond{has(`^blocks\.\d+\.attn1\.to_q\.weight$`), rank(`^patch_embedding\.weight$`, 5)}},
	{"qwen_image", KindDiffusion, "", []cond{has(`^transformer_blocks\.\d+\.img_mod\.`), has(`^transformer_blocks\.\d+\.txt_mod\.`)}},
	{"z_image", KindDiffusion, "", []cond{has(`^noise_refiner\.\d+\.`), has(`^context_refiner\.\d+\.`), has(`^layers\.\d+\.`)}},

	// Text encoders.
	{"clip", KindTextEncoder, "", []cond{has(hfClipLayer)}},
	{"clip_l", KindTextEncoder, "", []cond{has(hfClipLayer), shape(hfClipTok, -1, 768)}},
	{"clip_h", KindTextEncoder, "", []cond{has(hfClipLayer), shape(hfClipTok, -1, 1024)}},
	{"clip_g", KindTextEncoder, "", []cond{has(hfClipLayer), shape(hfClipTok, -1, 1280)}},
	{"clip", KindTextEncoder, "open_clip", []cond{has(ocClipLayer)}},
	{"clip_l", KindTextEncoder, "open_clip", []cond{has(ocClipLayer), shape(ocClipTok, -1, 768)}},
	{"clip_h", KindTextEncoder, "open_clip", []cond{has(ocClipLayer), shape(ocClipTok, -1, 1024)}},
	{"clip_g", KindTextEncoder, "open_clip", []cond{has(ocClipLayer), shape(ocClipTok, -1, 1280)}},
	{"t5", KindTextEncoder, "", []cond{has(t5Layer)}},
	{"t5xxl", KindTextEncoder, "", []cond{has(t5Layer), shape(t5Layer, -1, 4096)}},
	{"t5xxl", KindTextEncoder, "umt5", []cond{has(t5Layer), shape(t5Layer, -1, 4096), shape(t5Embed, 256384, -1)}},
	{"llm", KindTextEncoder, "", []cond{has(llmLayer)}},
	{"llm", KindTextEncoder, "", []cond{has(ggufLLM)}},
	{"llm", KindTextEncoder, "qwen3", []cond{has(llmLayer), has(`self_attn\.q_norm\.weight$`), shape(llmEmbed, 151936, -1)}},
	{"llm", KindTextEncoder, "qwen2.5", []cond{has(llmLayer), lacks(`self_attn\.q_norm\.weight$`), shape(llmEmbed, 152064, -1)}},
	{"llm", KindTextEncoder, "llama3", []cond{has(llmLayer), shape(llmEmbed, 128256, -1)}},

	// VAEs.
	{"vae", KindVAE, "", []cond{has(ldmVAE)}},
	{"vae", KindVAE, "4ch", []cond{has(ldmVAE), shape(`^decoder\.conv_in\.weight$`, -1, 4, -1, -1)}},
	{"vae", KindVAE, "16ch", []cond{has(ldmVAE), shape(`^decoder\.conv_in\.weight$`, -1, 16, -1, -1)}},
	{"vae", KindVAE, "diffusers", []cond{has(dfVAE)}},
	{"vae", KindVAE, "wan", []cond{has(wanVAE)}},
}

// prefixes are the component prefixes of single-file checkpoints (LDM,
// SGM, ComfyUI, stable-diffusion.cpp), longest alternatives first. Inner
// wrappers (transformer., model.) are part of the prefix.
var prefixes = []*regexp.Regexp{
	regexp.MustCompile(`^model\.diffusion_model\.`),
	regexp.MustCompile(`^diffusion_model\.`),
	regexp.MustCompile(`^first_stage_model\.`),
	regexp.MustCompile(`^vae\.`),
	regexp.MustCompile(`^cond_stage_model\.(transformer\.|model\.)?`),
	regexp.MustCompile(`^conditioner\.embedders\.\d+\.(transformer\.|model\.)?`),
	regexp.MustCompile(`^text_encoders\.[A-Za-z0-9_]+\.(transformer\.)?`),
	regexp.MustCompile(`^text_encoder(_\d+)?\.`),
	regexp.MustCompile(`^unet\.`),
}

// prefixHints name a text encoder by its prefix when the tensors alone
// give only the family (a narrow test model, a CLIP whose width is not
// one of the known ones): the prefixes themselves are the convention that
// stable-diffusion.cpp and the LDM/SGM checkpoints follow.
var prefixHints = []struct {
	re      *regexp.Regexp
	generic string
	name    string
}{
	{regexp.MustCompile(`^text_encoders\.clip_l\.`), "clip", "clip_l"},
	{regexp.MustCompile(`^text_encoders\.clip_g\.`), "clip", "clip_g"},
	{regexp.MustCompile(`^cond_stage_model\.transformer\.$`), "clip", "clip_l"},
	{regexp.MustCompile(`^conditioner\.embedders\.0\.transformer\.$`), "clip", "clip_l"},
	{regexp.MustCompile(`^conditioner\.embedders\.1\.model\.$`), "clip", "clip_g"},
	{regexp.MustCompile(`^text_encoders\.t5xxl\.`), "t5", "t5xxl"},
}

func hintedName(prefix, name string) string {
	for _, h := range prefixHints {
		if h.generic == name && h.re.MatchString(prefix) {
			return h.name
		}
	}
	return name
}

// prefixOf returns the component prefix of name ("" when none applies).
func prefixOf(name string) string {
	for _, re := range prefixes {
		if loc := re.FindStringIndex(name); loc != nil {
			return name[:loc[1]]
		}
	}
	return ""
}

// shapeMatches checks c's rank and dims (the name is matched separately).
func (c cond) shapeMatches(t *formats.Tensor) bool {
	if c.ndim != 0 && len(t.Shape) != c.ndim {
		return false
	}
	for i, d := range c.dims {
		if d >= 0 && t.Shape[i] != d {
			return false
		}
	}
	return true
}

// group is the tensors sharing one prefix.
type group struct {
	prefix  string
	tensors []*formats.Tensor
}

// DetectArchitecture recognises the architecture and components of a
// checkpoint from its tensor names and shapes, with the rule table above.
func DetectArchitecture(tensors []formats.Tensor) Architecture {
	var groups []*group
	byPrefix := map[string]*group{}
	for i := range tensors {
		p := prefixOf(tensors[i].Name)
		g := byPrefix[p]
		if g == nil {
			g = &group{prefix: p}
			byPrefix[p] = g
			groups = append(groups, g)
		}
		g.tensors = append(g.tensors, &tensors[i])
	}
	arch := Architecture{Components: []Component{}}
	for _, g := range groups {
		found := detectGroup(g)
		if len(found) == 0 {
			arch.Unassigned += len(g.tensors)
			continue
		}
		var params, bytes int64
		for _, t := range g.tensors {
			params += t.Elements()
			bytes += t.Size
		}
		for _, r := range found {
			arch.Components = append(arch.Components, Component{
				Name: hintedName(g.prefix, r.name), Kind: r.kind, Variant: r.variant, Prefix: g.prefix,
				Tensors: len(g.tensors), Params: params, Bytes: bytes,
			})
		}
	}
	arch.Name = "unknown"
	for _, c := range arch.Components {
		if c.Kind == KindDiffusion {
			arch.Name = c.Name
			break
		}
	}
	if arch.Name == "unknown" && len(arch.Components) == 1 {
		arch.Name = arch.Components[0].Name
	}
	return arch
}

// condRef names condition c of rule r.
type condRef struct{ r, c int }

// The distinct regexps of the table, each with the conditions that use it,
// so that every tensor name is matched against each regexp once.
var (
	uniqRE   []*regexp.Regexp
	uniqRefs [][]condRef
	// uniqLit is the literal text an anchored regexp's match must start
	// with: a cheap test that rejects most names before the regexp runs.
	uniqLit []string
)

func init() {
	idx := map[string]int{}
	for i, r := range rules {
		for j, c := range r.conds {
			k, ok := idx[c.re.String()]
			if !ok {
				k = len(uniqRE)
				idx[c.re.String()] = k
				uniqRE = append(uniqRE, c.re)
				uniqRefs = append(uniqRefs, nil)
				lit := ""
				if strings.HasPrefix(c.re.String(), "^") {
					lit, _ = c.re.LiteralPrefix()
				}
				uniqLit = append(uniqLit, lit)
			}
			uniqRefs[k] = append(uniqRefs[k], condRef{i, j})
		}
	}
}

// detectGroup returns the best matching rule of each kind for one group.
func detectGroup(g *group) []*rule {
	// hit[i][j] reports whether some tensor satisfies rule i's condition j
	// (before negation).
	hit := make([][]bool, len(rules))
	for i := range rules {
		hit[i] = make([]bool, len(rules[i].conds))
	}
	for _, t := range g.tensors {
		name := strings.TrimPrefix(t.Name, g.prefix)
		for k, re := range uniqRE {
			if !strings.HasPrefix(name, uniqLit[k]) || !re.MatchString(name) {
				continue
			}
			for _, ref := range uniqRefs[k] {
				if !hit[ref.r][ref.c] && rules[ref.r].conds[ref.c].shapeMatches(t) {
					hit[ref.r][ref.c] = true
				}
			}
		}
	}
	best := map[string]int{}
	var order []string
	for i, r := range rules {
		ok := true
		for j, c := range r.conds {
			if hit[i][j] == c.absent {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		prev, seen := best[r.kind]
		if !seen {
			order = append(order, r.kind)
			best[r.kind] = i
		} else if len(r.conds) > len(rules[prev].conds) {
			best[r.kind] = i
		}
	}
	var out []*rule
	for _, k := range order {
		out = append(out, &rules[best[k]])
	}
	return out
}
