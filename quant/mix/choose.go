package mix

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// neverQuantize lists, per architecture (ComfyUI-GGUF's names), the name
// fragments of tensors that stay in high precision because quantizing them
// hurts image quality far more than it saves.
var neverQuantize = map[string][]string{
	"flux":       {"txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.", "final_layer."},
	"hyvid":      {"txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.", "final_layer."},
	"sd1":        {"class_embedding.", "time_embedding.", "add_embedding.", "time_embed.", "label_emb.", "conv_in.", "conv_out.", "input_blocks.0.0.weight", "out.2.weight"},
	"sdxl":       {"class_embedding.", "time_embedding.", "add_embedding.", "time_embed.", "label_emb.", "conv_in.", "conv_out.", "input_blocks.0.0.weight", "out.2.weight"},
	"sd3":        {"final_layer.", "time_text_embed.", "context_embedder.", "t_embedder.", "y_embedder.", "x_embedder.", "proj_out.weight", "pos_embed"},
	"aura":       {"t_embedder.", "init_x_linear.", "modF.1.weight", "cond_seq_linear.weight", "final_linear.weight", "positional_encoding", "register_tokens"},
	"ltxv":       {"adaln_single.", "caption_projection.", "patchify_proj.", "proj_out.", "scale_shift_table"},
	"wan":        {"modulation.", "patch_embedding.", "text_embedding.", "time_projection.", "time_embedding.", "img_emb.", "head."},
	"hidream":    {"p_embedder.", "t_embedder.", "x_embedder.", "final_layer.", ".ff_i.gate.weight", "caption_projection."},
	"cosmos":     {"p_embedder.", "t_embedder.", "x_embedder.", "t_embedding_norm.", "pos_embedder.", "final_layer."},
	"lumina2":    {"t_embedder.", "x_embedder.", "final_layer.", "cap_embedder.", "context_refiner.", "noise_refiner."},
	"qwen_image": {"img_in.", "txt_in.", "time_text_embed.", "proj_out.", "norm_out."},
}

// highPrecision lists, per architecture, tensors kept in F32 (ComfyUI-GGUF's keys_hiprec).
var highPrecision = map[string][]string{
	"hidream": {".ff_i.gate.weight", "img_emb.emb_pos"},
	"cosmos":  {"pos_embedder"},
	"wan":     {".modulation"},
	"ltxv":    {"scale_shift_table"},
	"lumina2": {"x_pad_token", "cap_pad_token"},
}

// ComfyArch maps sdtool's detected architecture names to ComfyUI-GGUF's
// general.architecture values ("" when ComfyUI-GGUF has none).
var ComfyArch = map[string]string{
	"sd1": "sd1", "sd2": "sd1", "sdxl": "sdxl", "sd3": "sd3", "flux": "flux", "wan": "wan",
	"qwen_image": "qwen_image", "z_image": "lumina2", "lumina2": "lumina2", "hidream": "hidream",
	"cosmos": "cosmos", "ltxv": "ltxv", "hyvid": "hyvid", "aura": "aura",
}

var (
	vProjection = regexp.MustCompile(`(attn_v\.weight|\.to_v\.weight|\.v\.weight|\.attn\.w[12]v\.weight|_attn\.v_proj\.weight|\.add_v_proj\.weight)$`)
	fusedQKV    = regexp.MustCompile(`(attn_qkv\.weight|attn\.qkv\.weight|attention\.qkv\.weight)$`)
	ffnDown     = regexp.MustCompile(`(ffn_down|experts\.[0-9]+\.w2\.weight|\.ffn\.2\.weight|\.ff\.net\.2\.weight|\.mlp\.layer2\.weight|\.adaln_modulation_mlp\.2\.weight|\.feed_forward\.w2\.weight|\.img_mlp\.net\.2\.weight|\.txt_mlp\.net\.2\.weight)$`)
	blockIndex  = regexp.MustCompile(`transformer_blocks\.([0-9]+)\.`)
)

// Input describes one source tensor for planning.
type Input struct {
	// Name is the tensor name.
	Name string
	// Shape is the PyTorch-order shape.
	Shape []int64
	// Source is the stored type.
	Source formats.DType
}

// Override is a user rule: Match returns the type for a name, or false.
type Override func(name string) (formats.DType, bool)

// Options tunes a plan.
type Options struct {
	// Arch is the detected architecture (sd1, sdxl, flux, ...); "" for none.
	Arch string
	// Pure gives every eligible tensor the base type, with no upgrades.
	Pure bool
	// ReshapeConv reshapes sd1/sdxl conv kernels to rows of 256 so they can
	// be k-quantized (ComfyUI-GGUF's shape fix; sd.cpp cannot load the result).
	ReshapeConv bool
	// Override, when set, gives a user-chosen type for matching eligible tensors.
	Override Override
}

// Choice is the plan for one tensor.
type Choice struct {
	// Type is the output type.
	Type formats.DType
	// Shape is the output shape (differs from the input only when reshaped).
	Shape []int64
	// Reshaped records that the tensor was viewed as rows of 256 (store
	// comfy.gguf.orig_shape).
	Reshaped bool
	// Quantized reports that the tensor was eligible for the mix.
	Quantized bool
	// Reason says why the type was chosen, for --dry-run.
	Reason string
}

// Choose picks a type for every input tensor, in order.
func Choose(f FType, inputs []Input, opts Options) ([]Choice, error) {
	lastBlock := -1
	for _, in := range inputs {
		if m := blockIndex.FindStringSubmatch(in.Name); m != nil {
			if n, _ := strconv.Atoi(m[1]); n > lastBlock {
				lastBlock = n
			}
		}
	}
	p := planner{f: f, opts: opts, lastBlock: lastBlock}
	out := make([]Choice, len(inputs))
	for i, in := range inputs {
		c, err := p.choose(in)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

type planner struct {
	f         FType
	opts      Options
	lastBlock int
	vSeen     int
}

func (p *planner) choose(in Input) (Choice, error) {
	c := Choice{Shape: in.Shape}
	if !in.Source.Info().Float && !in.Source.Quantized() {
		c.Type, c.Reason = in.Source, "not a float tensor: copied"
		return c, nil
	}
	shape := in.Shape
	if p.opts.ReshapeConv && (p.opts.Arch == "sd1" || p.opts.Arch == "sdxl" || p.opts.Arch == "sd2") {
		if rs, ok := reshapeConv(shape); ok {
			shape, c.Shape, c.Reshaped = rs, rs, true
		}
	}
	if why := p.ineligible(in.Name, shape); why != "" {
		c.Type, c.Reason = p.highPrecisionType(in, shape), why
		return c, nil
	}
	c.Quantized = true
	t, reason := p.f.Base, "base type of "+p.f.Name
	if !p.opts.Pure && !p.f.Plain {
		if up, why := p.upgrade(in.Name); why != "" {
			t, reason = up, why
		}
	}
	if p.opts.Override != nil {
		if ot, ok := p.opts.Override(in.Name); ok {
			t, reason = ot, "user rule"
		}
	}
	row := shape[len(shape)-1]
	if fb := fallback(t, row); fb != t {
		reason = fmt.Sprintf("%s; row of %d does not fit %s: %s is the closest type that fits", reason, row, t, fb)
		t = fb
	}
	c.Type, c.Reason = t, reason
	return c, nil
}

// ineligible says why a tensor is not quantized by the mix, or "".
func (p *planner) ineligible(name string, shape []int64) string {
	if !strings.HasSuffix(name, "weight") {
		return "name does not end in weight"
	}
	if len(shape) != 2 {
		return fmt.Sprintf("%d-D tensor (image-model mixes quantize only 2-D weights)", len(shape))
	}
	if strings.HasSuffix(name, "_norm.weight") {
		return "norm weight"
	}
	for _, s := range neverQuantize[p.opts.Arch] {
		if strings.Contains(name, s) {
			return fmt.Sprintf("kept for %s (%s)", p.opts.Arch, s)
		}
	}
	for _, s := range highPrecision[p.opts.Arch] {
		if strings.Contains(name, s) {
			return fmt.Sprintf("high precision for %s (%s)", p.opts.Arch, s)
		}
	}
	return ""
}

// highPrecisionType is the type of a tensor the mix does not quantize:
// F32 for 1-D, small (≤1024 elements) and high-precision tensors from an
// F32 or BF16 source; otherwise BF16 stays BF16 and the rest becomes F16.
func (p *planner) highPrecisionType(in Input, shape []int64) formats.DType {
	n, _ := formats.Elements(shape)
	small := len(shape) <= 1 || n <= 1024
	for _, s := range highPrecision[p.opts.Arch] {
		small = small || strings.Contains(in.Name, s)
	}
	switch {
	case in.Source == formats.F32 && small, in.Source == formats.BF16 && small:
		return formats.F32
	case in.Source == formats.BF16:
		return formats.BF16
	case in.Source == formats.F32 && p.f.Base == formats.F32:
		return formats.F32
	}
	return formats.F16
}

// upgrade applies the image-model mix rules; "" means none applied.
func (p *planner) upgrade(name string) (formats.DType, string) {
	f := p.f
	k := f.Base.Quantized() && f.Level != 0 || f.Base == formats.Q2_K
	switch {
	case vProjection.MatchString(name):
		p.vSeen++
		switch {
		case f.Base == formats.Q2_K:
			return formats.Q3_K, "V projection"
		case f.Name == "Q3_K_M" && p.vSeen <= 2, f.Name == "Q3_K_L", f.Name == "Q4_K_S" && p.vSeen <= 4:
			return formats.Q5_K, "V projection"
		case f.Name == "Q3_K_M":
			return formats.Q4_K, "V projection"
		case f.Name == "Q4_K_M", f.Name == "Q5_K_M":
			return formats.Q6_K, "V projection"
		}
	case fusedQKV.MatchString(name):
		switch f.Name {
		case "Q3_K_M", "Q3_K_L":
			return formats.Q4_K, "fused qkv"
		case "Q4_K_M":
			return formats.Q5_K, "fused qkv"
		case "Q5_K_M":
			return formats.Q6_K, "fused qkv"
		}
	case ffnDown.MatchString(name):
		switch f.Name {
		case "Q3_K_M":
			return formats.Q4_K, "FFN down"
		case "Q3_K_L", "Q4_K_S":
			return formats.Q5_K, "FFN down"
		case "Q4_K_M", "Q5_K_M":
			return formats.Q6_K, "FFN down"
		case "Q4_0":
			return formats.Q4_1, "FFN down"
		case "Q5_0":
			return formats.Q5_1, "FFN down"
		}
	}
	if p.opts.Arch == "qwen_image" && k {
		if m := blockIndex.FindStringSubmatch(name); m != nil {
			if n, _ := strconv.Atoi(m[1]); n == 0 || n == p.lastBlock {
				switch {
				case f.Base == formats.Q2_K || f.Base == formats.Q3_K:
					return formats.Q4_K, "first/last Qwen-Image block"
				case f.Name == "Q4_K_M":
					return formats.Q5_K, "first/last Qwen-Image block"
				case f.Name == "Q5_K_M":
					return formats.Q6_K, "first/last Qwen-Image block"
				}
			}
		}
	}
	return 0, ""
}

// fallback returns the closest type whose block fits a row of n elements,
// following llama.cpp's row-size fallback, and F16 when none fits.
func fallback(t formats.DType, n int64) formats.DType {
	fits := func(t formats.DType) bool { return n%int64(t.Info().BlockSize) == 0 }
	if fits(t) {
		return t
	}
	var next formats.DType
	switch t {
	case formats.TQ1_0, formats.TQ2_0:
		next = formats.Q4_0
	case formats.IQ2_XXS, formats.IQ2_XS, formats.IQ2_S, formats.IQ3_XXS, formats.IQ3_S, formats.IQ1_S, formats.IQ1_M,
		formats.Q2_K, formats.Q3_K, formats.IQ4_XS:
		next = formats.IQ4_NL
	case formats.Q4_K:
		next = formats.Q5_0
	case formats.Q5_K:
		next = formats.Q5_1
	case formats.Q6_K:
		next = formats.Q8_0
	default:
		return formats.F16
	}
	if fits(next) {
		return next
	}
	return formats.F16
}

// reshapeConv returns ComfyUI-GGUF's reshape of a tensor into rows of 256,
// applied to tensors with more than one dim, at least 512 elements, an
// element count divisible by 256 and a last dim that is not.
func reshapeConv(shape []int64) ([]int64, bool) {
	n, _ := formats.Elements(shape)
	if len(shape) <= 1 || n < 512 || n%256 != 0 || shape[len(shape)-1]%256 == 0 {
		return nil, false
	}
	return []int64{n / 256, 256}, true
}
