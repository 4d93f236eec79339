package merge

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/quant/mix"
	"github.com/sdtool/sdtool/tensor"
)

// Method is an arithmetic merge method.
type Method string

// Arithmetic merge methods; see Arithmetic for their definitions.
const (
	// WeightedSum is (1-α)·A + α·B.
	WeightedSum Method = "weighted_sum"
	// AddDifference is A + α·(B - C).
	AddDifference Method = "add_difference"
	// TIES is A + α·TIES(B-A, C-A): trim each delta to its top density by
	// magnitude, elect a sign per element, average the agreeing deltas.
	TIES Method = "ties"
	// DARE is A + α·mean(drop(B-A), drop(C-A)): drop delta elements with
	// probability p, rescale the kept ones by 1/(1-p).
	DARE Method = "dare"
	// Slerp interpolates A and B, flattened, along the great circle.
	Slerp Method = "slerp"
	// copyA re-encodes A's tensor (type change, or a tensor missing from B).
	copyA Method = "copy"
)

// Methods lists the arithmetic methods in the order the help shows them.
var Methods = []Method{WeightedSum, AddDifference, TIES, DARE, Slerp}

// Defaults of the arithmetic parameters.
const (
	// DefaultDensity is the fraction of each delta TIES keeps.
	DefaultDensity = 0.2
	// DefaultDropP is DARE's drop probability.
	DefaultDropP = 0.5
)

// slerpDotThreshold: above this |cos| the two tensors are nearly colinear,
// sin(Ω) is tiny and slerp's coefficients lose precision, so lerp is used.
const slerpDotThreshold = 0.9995

// Arithmetic describes an element-wise merge of models A, B and C. All
// values are computed in float32 (dot products and norms in float64).
//
// Multi-model TIES and DARE take A as the base and B (and C, when given) as
// fine-tunes of it: the deltas are B−A and C−A, and the result is A plus α
// times the merged delta. TIES trims each delta tensor to the elements whose
// magnitude is at least its k-th largest (k = ceil(density·n), found by an
// exact two-pass radix selection; elements tied with the threshold are all
// kept, zeros never), elects per element the sign of the sum of the trimmed
// deltas, and takes the mean of the trimmed deltas that have that sign.
// DARE drops each delta element with probability p (see Key and Uniform),
// scales the kept ones by 1/(1-p) and takes the mean over the fine-tunes.
type Arithmetic struct {
	// Method is the merge method.
	Method Method
	// A, B and C are the input paths; C is used by add_difference (required),
	// ties and dare (optional).
	A, B, C string
	// Alpha is the global α; nil means 0.5 for weighted_sum and slerp, 1 otherwise.
	Alpha *float64
	// AlphaRules are "REGEX=ALPHA,..." per-tensor alphas, the first match winning.
	AlphaRules string
	// Density is TIES's kept fraction in (0, 1]; 0 means DefaultDensity.
	Density float64
	// DropP is DARE's drop probability in [0, 1); nil means DefaultDropP.
	DropP *float64
	// Seed keys DARE's generator.
	Seed int64
	// Type is the output type of floating-point tensors ("" follows A; any
	// type with a quant encoder; block types apply to tensors of 2+ dims
	// whose rows are whole blocks, the rest keep A's type).
	Type string
	// AllowMissing copies A's tensor when B or C lacks it or has another
	// shape, and ignores tensors that only B or C has.
	AllowMissing bool
}

// ParseAlphaRules parses "REGEX=ALPHA,REGEX=ALPHA" into rules whose Value
// is the tensor's α, the first match winning. An item is split at its
// last '='; a comma inside a pattern (a{1,2}) is kept when the text before
// it has no '=' yet. Empty items are skipped.
func ParseAlphaRules(s string) ([]pipeline.Rule[float64], error) {
	var rules []pipeline.Rule[float64]
	pending := ""
	parts := strings.Split(s, ",")
	for i, part := range parts {
		item := part
		if pending != "" {
			item = pending + "," + part
		}
		eq := strings.LastIndexByte(item, '=')
		if eq < 0 {
			if strings.TrimSpace(item) == "" {
				pending = ""
				continue
			}
			if i == len(parts)-1 {
				return nil, fmt.Errorf("--alpha-rules: item %q has no =ALPHA", item)
			}
			pending = item
			continue
		}
		pending = ""
		pat, val := item[:eq], strings.TrimSpace(item[eq+1:])
		if pat == "" {
			return nil, fmt.Errorf("--alpha-rules: item %q has an empty pattern", item)
		}
		a, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(a) || math.IsInf(a, 0) {
			return nil, fmt.Errorf("--alpha-rules: item %q: alpha %q is not a finite number", item, val)
		}
		re, err := pipeline.CompilePattern(pat)
		if err != nil {
			return nil, fmt.Errorf("--alpha-rules: %v", err)
		}
		rules = append(rules, pipeline.Rule[float64]{Pattern: pat, Re: re, Value: a})
	}
	return rules, nil
}

// alphaFor returns the first matching rule's α, or def.
func alphaFor(rules []pipeline.Rule[float64], name string, def float64) float64 {
	if i := pipeline.FirstMatch(rules, name); i >= 0 {
		return rules[i].Value
	}
	return def
}

// inputs a method reads besides A: B always, C required or optional.
func (m Method) usesC() (required, allowed bool) {
	switch m {
	case AddDifference:
		return true, true
	case TIES, DARE:
		return false, true
	}
	return false, false
}

// ParseMethod checks a method name.
func ParseMethod(s string) (Method, error) {
	for _, m := range Methods {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, len(Methods))
	for i, m := range Methods {
		names[i] = string(m)
	}
	return "", fmt.Errorf("unknown merge method %q (want %s)", s, strings.Join(names, ", "))
}

// PlanArithmetic opens A, B (and C) and plans the merged output out
// (.safetensors or .gguf by extension). Missing tensors, shape mismatches,
// types the output cannot hold and parameters out of range are reported
// here, before anything is created.
func PlanArithmetic(a *Arithmetic, out string) (_ *pipeline.Plan, err error) {
	p, err := newPlan(out)
	if err != nil {
		return nil, err
	}
	format := p.Format
	m, err := ParseMethod(string(a.Method))
	if err != nil {
		return nil, err
	}
	needC, allowC := m.usesC()
	switch {
	case a.A == "" || a.B == "":
		return nil, fmt.Errorf("%s needs -a A and -b B", m)
	case needC && a.C == "":
		return nil, fmt.Errorf("%s needs -c C (A + alpha*(B - C))", m)
	case !allowC && a.C != "":
		return nil, fmt.Errorf("%s takes no -c", m)
	}
	alpha := 1.0
	if m == WeightedSum || m == Slerp {
		alpha = 0.5
	}
	if a.Alpha != nil {
		alpha = *a.Alpha
	}
	if math.IsNaN(alpha) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("--alpha %v is not a finite number", alpha)
	}
	rules, err := ParseAlphaRules(a.AlphaRules)
	if err != nil {
		return nil, err
	}
	density := a.Density
	if density == 0 {
		density = DefaultDensity
	}
	if !(density > 0 && density <= 1) {
		return nil, fmt.Errorf("--density %v: want a fraction in (0, 1]", a.Density)
	}
	dropP := DefaultDropP
	if a.DropP != nil {
		dropP = *a.DropP
	}
	if !(dropP >= 0 && dropP < 1) {
		return nil, fmt.Errorf("--drop-p %v: want a probability in [0, 1)", dropP)
	}
	var want formats.DType
	var enc quant.Codec
	typeSet := a.Type != ""
	if typeSet {
		t, err := mix.LookupSingleType(a.Type, convrot.Names(), "a LoRA bake (--base --lora) takes it directly")
		if err != nil {
			return nil, fmt.Errorf("--type: %w", err)
		}
		if !format.Stores(t) {
			return nil, fmt.Errorf("--type %s cannot be stored in %s (%s)", t, format.Name, out)
		}
		if enc, err = quant.Encoder(t); err != nil {
			return nil, fmt.Errorf("--type %s: %w", t, err)
		}
		if enc.NeedsWeights {
			return nil, fmt.Errorf("--type %s needs an importance matrix; merge to f16 and run sdtool quantize --imatrix", t)
		}
		want = t
	}

	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	open := func(path string) (formats.Model, *tensor.View, error) {
		fm, err := formats.Open(path)
		if err != nil {
			return nil, nil, err
		}
		p.Use(fm)
		dm, err := tensor.NewView(fm)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return fm, dm, nil
	}
	fa, da, err := open(a.A)
	if err != nil {
		return nil, err
	}
	_, db, err := open(a.B)
	if err != nil {
		return nil, err
	}
	var dc *tensor.View
	if a.C != "" {
		if _, dc, err = open(a.C); err != nil {
			return nil, err
		}
	}

	var errs errList
	var missing, only []string // A's tensors the others lack; the others' that A lacks
	merged, unmerged := 0, 0   // tensors combined; A's copied because another input lacks them
	others := []*tensor.View{db}
	otherPaths := []string{a.B}
	if dc != nil {
		others, otherPaths = append(others, dc), append(otherPaths, a.C)
	}
	for _, sa := range da.Sources {
		name := sa.Name
		// The type this tensor would have without --type.
		base := sa.Tensor.Type
		if sa.Module != nil {
			base = formats.BF16
		}
		outT := base
		if sa.Float() && typeSet {
			outT = want
			if want.Quantized() && !(len(sa.Shape()) >= 2 && sa.Shape()[len(sa.Shape())-1]%int64(want.Info().BlockSize) == 0) {
				outT = base
			}
		}
		if !format.Stores(outT) {
			errs.add(fmt.Errorf("%s: tensor %q: %s cannot be stored in %s (%s); choose another --type", fa.Path(), name, outT, format.Name, out))
			continue
		}

		// Find the tensor in the other inputs.
		var peers []*tensor.Source
		var why string
		var undecodable error
		for i, om := range others {
			so, ok := om.Lookup(name)
			switch {
			case !ok:
				why = fmt.Sprintf("missing from %s", otherPaths[i])
			case !slices.Equal(so.Shape(), sa.Shape()):
				why = fmt.Sprintf("shape %v in %s, %v in %s", sa.Shape(), a.A, so.Shape(), otherPaths[i])
			case sa.Float() && so.Err() != nil:
				// Not a missing tensor: --allow-missing does not hide it.
				undecodable = so.Err()
			}
			if why != "" || undecodable != nil {
				break
			}
			peers = append(peers, so)
		}
		if undecodable != nil {
			errs.add(undecodable)
			continue
		}
		if !sa.Float() || why != "" {
			if why != "" && !a.AllowMissing {
				missing = append(missing, fmt.Sprintf("%q (%s)", name, why))
				continue
			}
			// Copied from A: raw bytes when the type stays, decoded otherwise.
			how := "copy from A"
			if why != "" {
				how += " (" + why + ")"
				unmerged++
			}
			var prod pipeline.Producer
			if sa.Module == nil && outT == sa.Tensor.Type {
				prod = pipeline.Copy(fa, sa.Tensor)
			} else {
				c, err := newCombo(copyA, 0, sa, nil, outT)
				if err != nil {
					errs.add(err)
					continue
				}
				prod = c
			}
			add(p, name, outT, sa.Shape(), how, prod, sa)
			continue
		}
		al := alphaFor(rules, name, alpha)
		c, err := newCombo(m, al, sa, peers, outT)
		if err != nil {
			errs.add(err)
			continue
		}
		c.density, c.dropP, c.seed = density, dropP, a.Seed
		how := fmt.Sprintf("%s alpha=%g", m, al)
		switch m {
		case TIES:
			how += fmt.Sprintf(" density=%g", density)
		case DARE:
			how += fmt.Sprintf(" p=%g seed=%d", dropP, a.Seed)
		}
		add(p, name, outT, sa.Shape(), how, c, sa)
		merged++
	}
	// Tensors that only B or C has.
	for i, om := range others {
		for _, so := range om.Sources {
			if _, ok := da.Lookup(so.Name); !ok && !a.AllowMissing {
				only = append(only, fmt.Sprintf("%q (only in %s)", so.Name, otherPaths[i]))
			}
		}
	}
	if len(missing) > 0 {
		errs.add(fmt.Errorf("%s of %s %s missing from %s or %s another shape there (--allow-missing copies A's): %s",
			pipeline.Count(len(missing), "tensor", "tensors"), a.A, plural(len(missing), "is", "are"), strings.Join(otherPaths, " or "),
			plural(len(missing), "has", "have"), listSome(missing)))
	}
	if len(only) > 0 {
		errs.add(fmt.Errorf("%s of %s %s not in %s (--allow-missing leaves them out): %s",
			pipeline.Count(len(only), "tensor", "tensors"), strings.Join(otherPaths, " and "), plural(len(only), "is", "are"), a.A, listSome(only)))
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	if merged == 0 {
		// Writing A again under another name is never what a merge was asked for.
		return nil, fmt.Errorf("%s: no tensor of %s is in %s with the same shape and a float type: nothing to merge",
			out, a.A, strings.Join(otherPaths, " and "))
	}
	p.Notes = append(p.Notes, fmt.Sprintf("merged: %s of %d by %s", pipeline.Count(merged, "tensor", "tensors"), len(da.Sources), m))
	if unmerged > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("warning: %s of %s copied unmerged: %s lacks them or has another shape (--allow-missing)",
			pipeline.Count(unmerged, "tensor", "tensors"), a.A, strings.Join(otherPaths, " or ")))
	}
	names := make([]string, len(da.Sources))
	for i, s := range da.Sources {
		names[i] = s.Name
	}
	for _, r := range pipeline.UnmatchedRules(rules, names) {
		p.Notes = append(p.Notes, fmt.Sprintf("--alpha-rules rule %q matches no tensor of %s", r.Pattern+"="+strconv.FormatFloat(r.Value, 'g', -1, 64), a.A))
	}
	p.Header.Metadata = arithmeticMetadata(p.Format, fa, a, m)
	pipeline.FoldHighDims(p)
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// arithmeticMetadata keeps A's model metadata (without general.file_type
// and the other storage keys, which the new types may contradict; strings
// only for safetensors) and adds sdtool.merge, a one-line description of
// the merge.
func arithmeticMetadata(format formats.Creator, fa formats.Model, a *Arithmetic, m Method) formats.Metadata {
	desc := fmt.Sprintf("method=%s a=%s b=%s", m, filepath.Base(a.A), filepath.Base(a.B))
	if a.C != "" {
		desc += " c=" + filepath.Base(a.C)
	}
	if a.Alpha != nil {
		desc += fmt.Sprintf(" alpha=%g", *a.Alpha)
	}
	if a.AlphaRules != "" {
		desc += " alpha_rules=" + strconv.Quote(a.AlphaRules)
	}
	// A's model metadata, in either output format (pipeline.CarryMetadata:
	// head counts and an embedded tokenizer survive, storage keys do not).
	carried, _ := pipeline.CarryMetadata(fa.Metadata(), format.Name)
	var meta formats.Metadata
	for _, kv := range carried {
		if kv.Key == "sdtool.merge" || kv.Key == "format" && format.Name != fa.Info().Format {
			continue
		}
		meta = append(meta, kv)
	}
	return append(meta, formats.KV{Key: "sdtool.merge", Type: formats.TypeString, Value: desc})
}

// plural returns one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
