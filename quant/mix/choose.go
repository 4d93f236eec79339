package mix

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
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
	// Arch is the detected family (a family ID such as sd1, sdxl, flux, or
	// a ComfyUI-GGUF architecture name); "" for none. It applies to every
	// tensor when Layout is nil.
	Arch string
	// Layout, when set, is the detected checkpoint: each tensor is planned
	// with the family of the component that holds it (a checkpoint's CLIP
	// keeps CLIP's tables, its UNet the UNet's).
	Layout *family.Architecture
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
	p := planner{f: f, opts: opts, lastBlock: map[string]int{}}
	for _, in := range inputs {
		for _, u := range p.upgrades(in.Name) {
			if u.Role != family.RoleEdgeBlock {
				continue
			}
			if m := u.Pattern.FindStringSubmatch(in.Name); m != nil {
				n, _ := strconv.Atoi(m[1])
				if last, ok := p.lastBlock[u.Pattern.String()]; !ok || n > last {
					p.lastBlock[u.Pattern.String()] = n
				}
			}
		}
	}
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
	f    FType
	opts Options
	// lastBlock is the highest block index each edge-block pattern saw.
	lastBlock map[string]int
	vSeen     int
}

// familyOf returns the family whose rules plan the tensor called name (nil
// for an unrecognised model).
func (p *planner) familyOf(name string) *family.Family {
	f, _ := p.classify(name, nil)
	return f
}

// classify returns the tensor's family and how that family treats it.
func (p *planner) classify(name string, shape []int64) (*family.Family, family.Class) {
	if p.opts.Layout != nil {
		if f, c := p.opts.Layout.Classify(name, shape); f != nil {
			return f, c
		}
	}
	f := family.Lookup(p.opts.Arch)
	return f, f.Classify(name, shape)
}

// upgrades returns the mix upgrades that apply to the tensor called name.
func (p *planner) upgrades(name string) []family.Upgrade {
	if f := p.familyOf(name); f != nil {
		return f.Upgrades
	}
	return family.Std
}

// reshapes reports whether --reshape-conv applies to the tensor's family
// (ComfyUI-GGUF's shape_fix families: the UNets).
func (p *planner) reshapes(name string) bool {
	f := p.familyOf(name)
	return f != nil && f.ReshapeConv
}

func (p *planner) choose(in Input) (Choice, error) {
	c := Choice{Shape: in.Shape}
	if !in.Source.Info().Float && !in.Source.Quantized() {
		c.Type, c.Reason = in.Source, "not a float tensor: copied"
		return c, nil
	}
	shape := in.Shape
	if p.opts.ReshapeConv && p.reshapes(in.Name) {
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
	f, c := p.classify(name, shape)
	if c.Keep != "" {
		return fmt.Sprintf("kept for %s (%s)", f.ID, c.Keep)
	}
	if c.F32 != "" {
		return fmt.Sprintf("high precision for %s (%s)", f.ID, c.F32)
	}
	return ""
}

// highPrecisionType is the type of a tensor the mix does not quantize:
// F32 for 1-D, small (≤1024 elements) and high-precision tensors from an
// F32 or BF16 source; otherwise BF16 stays BF16 and the rest becomes F16.
func (p *planner) highPrecisionType(in Input, shape []int64) formats.DType {
	n, _ := formats.Elements(shape)
	small := len(shape) <= 1 || n <= 1024 || p.f32(in.Name, shape)
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

// upgrade applies the image-model mix rules of the tensor's family; ""
// means none applied. Only the first role whose pattern matches is tried,
// then the first/last block rule.
func (p *planner) upgrade(name string) (formats.DType, string) {
	ups := p.upgrades(name)
	for _, u := range ups {
		if u.Role == family.RoleEdgeBlock || !u.Pattern.MatchString(name) {
			continue
		}
		if t, why := p.roleType(u.Role); why != "" {
			return t, why
		}
		break
	}
	f := p.f
	k := f.Base.Quantized() && f.Level != 0 || f.Base == formats.Q2_K
	for _, u := range ups {
		if u.Role != family.RoleEdgeBlock || !k {
			continue
		}
		m := u.Pattern.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n == 0 || n == p.lastBlock[u.Pattern.String()] {
			why := "first/last block"
			if fam := p.familyOf(name); fam != nil {
				why = "first/last " + fam.Title + " block"
			}
			switch {
			case f.Base == formats.Q2_K || f.Base == formats.Q3_K:
				return formats.Q4_K, why
			case f.Name == "Q4_K_M":
				return formats.Q5_K, why
			case f.Name == "Q5_K_M":
				return formats.Q6_K, why
			}
		}
	}
	return 0, ""
}

// roleType is the upgrade the mix gives a tensor of role ("" when none).
func (p *planner) roleType(role string) (formats.DType, string) {
	f := p.f
	switch role {
	case family.RoleV:
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
	case family.RoleQKV:
		switch f.Name {
		case "Q3_K_M", "Q3_K_L":
			return formats.Q4_K, "fused qkv"
		case "Q4_K_M":
			return formats.Q5_K, "fused qkv"
		case "Q5_K_M":
			return formats.Q6_K, "fused qkv"
		}
	case family.RoleFFNDown:
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

// f32 reports a tensor the family stores in F32.
func (p *planner) f32(name string, shape []int64) bool {
	_, c := p.classify(name, shape)
	return c.F32 != ""
}
