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
	"github.com/sdtool/sdtool/internal/option"
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
				return nil, option.Errorf("%s: item %q has no =ALPHA", option.Name("AlphaRules"), item)
			}
			pending = item
			continue
		}
		pending = ""
		pat, val := item[:eq], strings.TrimSpace(item[eq+1:])
		if pat == "" {
			return nil, option.Errorf("%s: item %q has an empty pattern", option.Name("AlphaRules"), item)
		}
		a, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(a) || math.IsInf(a, 0) {
			return nil, option.Errorf("%s: item %q: alpha %q is not a finite number", option.Name("AlphaRules"), item, val)
		}
		re, err := pipeline.CompilePattern(pat)
		if err != nil {
			return nil, option.Errorf("%s: %w", option.Name("AlphaRules"), err)
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
	s, err := arithSettingsOf(a, p.Format, out)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	ap := &arithPlanner{a: a, s: s, p: p, out: out, otherPaths: []string{a.B}}
	if err := ap.open(); err != nil {
		return nil, err
	}
	for _, sa := range ap.da.Sources {
		ap.planTensor(sa)
	}
	if err := ap.finish(); err != nil {
		return nil, err
	}
	p.Header.Metadata = arithmeticMetadata(p.Format, ap.fa, a, s.m)
	pipeline.FoldHighDims(p)
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// arithSettings are an Arithmetic's parameters, checked, with their defaults.
type arithSettings struct {
	m              Method
	alpha          float64
	rules          []pipeline.Rule[float64]
	density, dropP float64
	typeSet        bool
	want           formats.DType // the output type of float tensors, when typeSet
}

// arithSettingsOf checks a's inputs and parameters and fills in defaults.
func arithSettingsOf(a *Arithmetic, format formats.Creator, out string) (arithSettings, error) {
	var s arithSettings
	m, err := ParseMethod(string(a.Method))
	if err != nil {
		return s, err
	}
	s.m = m
	needC, allowC := m.usesC()
	switch {
	case a.A == "" || a.B == "":
		return s, fmt.Errorf("%s needs -a A and -b B", m)
	case needC && a.C == "":
		return s, fmt.Errorf("%s needs -c C (A + alpha*(B - C))", m)
	case !allowC && a.C != "":
		return s, fmt.Errorf("%s takes no -c", m)
	}
	s.alpha = 1.0
	if m == WeightedSum || m == Slerp {
		s.alpha = 0.5
	}
	if a.Alpha != nil {
		s.alpha = *a.Alpha
	}
	if math.IsNaN(s.alpha) || math.IsInf(s.alpha, 0) {
		return s, option.Errorf("%s %v is not a finite number", option.Name("Alpha"), s.alpha)
	}
	if s.rules, err = ParseAlphaRules(a.AlphaRules); err != nil {
		return s, err
	}
	s.density = a.Density
	if s.density == 0 {
		s.density = DefaultDensity
	}
	if !(s.density > 0 && s.density <= 1) {
		return s, option.Errorf("%s %v: want a fraction in (0, 1]", option.Name("Density"), a.Density)
	}
	s.dropP = DefaultDropP
	if a.DropP != nil {
		s.dropP = *a.DropP
	}
	if !(s.dropP >= 0 && s.dropP < 1) {
		return s, option.Errorf("%s %v: want a probability in [0, 1)", option.Name("DropP"), s.dropP)
	}
	s.typeSet = a.Type != ""
	if s.typeSet {
		s.want, err = arithOutputType(a.Type, format, out)
	}
	return s, err
}

// arithOutputType checks the type a merge's float tensors are written in.
func arithOutputType(typ string, format formats.Creator, out string) (formats.DType, error) {
	t, err := mix.LookupSingleType(typ, convrot.Names(), "a LoRA bake (--base --lora) takes it directly")
	if err != nil {
		return 0, option.Errorf("%s: %w", option.Name("Type"), err)
	}
	if !format.Stores(t) {
		return 0, option.Errorf("%s %s cannot be stored in %s (%s)", option.Name("Type"), t, format.Name, out)
	}
	enc, err := quant.Encoder(t)
	if err != nil {
		return 0, option.Errorf("%s %s: %w", option.Name("Type"), t, err)
	}
	if enc.NeedsWeights {
		return 0, option.Errorf("%s %s needs an importance matrix; merge to f16 and run sdtool quantize %s", option.Name("Type"), t, option.Name("Imatrix"))
	}
	return t, nil
}

// arithPlanner is one PlanArithmetic in progress.
type arithPlanner struct {
	a   *Arithmetic
	s   arithSettings
	p   *pipeline.Plan
	out string

	fa         formats.Model
	da         *tensor.View
	others     []*tensor.View // B, and C when given
	otherPaths []string

	errs             errList
	missing, only    []string // A's tensors the others lack; the others' that A lacks
	merged, unmerged int      // tensors combined; A's copied because another input lacks them
}

// open opens A, B and C, each used by the plan (closed with it).
func (ap *arithPlanner) open() error {
	open := func(path string) (formats.Model, *tensor.View, error) {
		fm, err := formats.Open(path)
		if err != nil {
			return nil, nil, err
		}
		ap.p.Use(fm)
		dm, err := tensor.NewView(fm)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return fm, dm, nil
	}
	var err error
	if ap.fa, ap.da, err = open(ap.a.A); err != nil {
		return err
	}
	_, db, err := open(ap.a.B)
	if err != nil {
		return err
	}
	ap.others = []*tensor.View{db}
	if ap.a.C != "" {
		_, dc, err := open(ap.a.C)
		if err != nil {
			return err
		}
		ap.others, ap.otherPaths = append(ap.others, dc), append(ap.otherPaths, ap.a.C)
	}
	return nil
}

// outType returns the type tensor sa is written in: the --type for a
// float tensor whose rows the type's blocks divide, else its own (BF16
// for a ComfyUI module).
func (ap *arithPlanner) outType(sa *tensor.Source) formats.DType {
	base := sa.Tensor.Type
	if sa.Module != nil {
		base = formats.BF16
	}
	if !sa.Float() || !ap.s.typeSet {
		return base
	}
	want := ap.s.want
	if want.Quantized() && !(len(sa.Shape()) >= 2 && sa.Shape()[len(sa.Shape())-1]%int64(want.Info().BlockSize) == 0) {
		return base
	}
	return want
}

// peers finds A's tensor in the other inputs: all of them, or why one
// lacks it, or the error that keeps a float one from being decoded.
func (ap *arithPlanner) peers(sa *tensor.Source) (peers []*tensor.Source, why string, undecodable error) {
	for i, om := range ap.others {
		so, ok := om.Lookup(sa.Name)
		switch {
		case !ok:
			why = fmt.Sprintf("missing from %s", ap.otherPaths[i])
		case !slices.Equal(so.Shape(), sa.Shape()):
			why = fmt.Sprintf("shape %v in %s, %v in %s", sa.Shape(), ap.a.A, so.Shape(), ap.otherPaths[i])
		case sa.Float() && so.Err() != nil:
			// Not a missing tensor: --allow-missing does not hide it.
			undecodable = so.Err()
		}
		if why != "" || undecodable != nil {
			return nil, why, undecodable
		}
		peers = append(peers, so)
	}
	return peers, "", nil
}

// planTensor plans A's tensor sa: merged with its peers, or copied from A
// when it is not a float or another input lacks it (with AllowMissing).
func (ap *arithPlanner) planTensor(sa *tensor.Source) {
	name, outT := sa.Name, ap.outType(sa)
	if !ap.p.Format.Stores(outT) {
		ap.errs.add(option.Errorf("%s: tensor %q: %s cannot be stored in %s (%s); choose another %s", ap.fa.Path(), name, outT, ap.p.Format.Name, ap.out, option.Name("Type")))
		return
	}
	peers, why, undecodable := ap.peers(sa)
	if undecodable != nil {
		ap.errs.add(undecodable)
		return
	}
	if !sa.Float() || why != "" {
		ap.copyFromA(sa, outT, why)
		return
	}
	s := ap.s
	al := alphaFor(s.rules, name, s.alpha)
	c, err := newCombo(s.m, al, sa, peers, outT)
	if err != nil {
		ap.errs.add(err)
		return
	}
	c.density, c.dropP, c.seed = s.density, s.dropP, ap.a.Seed
	how := fmt.Sprintf("%s alpha=%g", s.m, al)
	switch s.m {
	case TIES:
		how += fmt.Sprintf(" density=%g", s.density)
	case DARE:
		how += fmt.Sprintf(" p=%g seed=%d", s.dropP, ap.a.Seed)
	}
	add(ap.p, name, outT, sa.Shape(), how, c, sa)
	ap.merged++
}

// copyFromA plans A's tensor as it is: raw bytes when the type stays,
// decoded otherwise; why says which input lacks it ("" for a tensor that
// is not a float).
func (ap *arithPlanner) copyFromA(sa *tensor.Source, outT formats.DType, why string) {
	if why != "" && !ap.a.AllowMissing {
		ap.missing = append(ap.missing, fmt.Sprintf("%q (%s)", sa.Name, why))
		return
	}
	how := "copy from A"
	if why != "" {
		how += " (" + why + ")"
		ap.unmerged++
	}
	var prod pipeline.Producer
	if sa.Module == nil && outT == sa.Tensor.Type {
		prod = pipeline.Copy(ap.fa, sa.Tensor)
	} else {
		c, err := newCombo(copyA, 0, sa, nil, outT)
		if err != nil {
			ap.errs.add(err)
			return
		}
		prod = c
	}
	add(ap.p, sa.Name, outT, sa.Shape(), how, prod, sa)
}

// finish reports the tensors only some inputs have and every error met,
// refuses a merge that merged nothing, and adds the plan's notes.
func (ap *arithPlanner) finish() error {
	a, otherPaths := ap.a, ap.otherPaths
	// Tensors that only B or C has.
	for i, om := range ap.others {
		for _, so := range om.Sources {
			if _, ok := ap.da.Lookup(so.Name); !ok && !a.AllowMissing {
				ap.only = append(ap.only, fmt.Sprintf("%q (only in %s)", so.Name, otherPaths[i]))
			}
		}
	}
	if missing := ap.missing; len(missing) > 0 {
		ap.errs.add(option.Errorf("%s of %s %s missing from %s or %s another shape there (%s copies A's): %s",
			pipeline.Count(len(missing), "tensor", "tensors"), a.A, plural(len(missing), "is", "are"), strings.Join(otherPaths, " or "),
			plural(len(missing), "has", "have"), option.Name("AllowMissing"), listSome(missing)))
	}
	if only := ap.only; len(only) > 0 {
		ap.errs.add(option.Errorf("%s of %s %s not in %s (%s leaves them out): %s",
			pipeline.Count(len(only), "tensor", "tensors"), strings.Join(otherPaths, " and "), plural(len(only), "is", "are"), a.A, option.Name("AllowMissing"), listSome(only)))
	}
	if err := ap.errs.err(); err != nil {
		return err
	}
	if ap.merged == 0 {
		// Writing A again under another name is never what a merge was asked for.
		return fmt.Errorf("%s: no tensor of %s is in %s with the same shape and a float type: nothing to merge",
			ap.out, a.A, strings.Join(otherPaths, " and "))
	}
	p := ap.p
	p.Notes = append(p.Notes, fmt.Sprintf("merged: %s of %d by %s", pipeline.Count(ap.merged, "tensor", "tensors"), len(ap.da.Sources), ap.s.m))
	if ap.unmerged > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("warning: %s of %s copied unmerged: %s lacks them or has another shape (--allow-missing)",
			pipeline.Count(ap.unmerged, "tensor", "tensors"), a.A, strings.Join(otherPaths, " or ")))
	}
	names := make([]string, len(ap.da.Sources))
	for i, s := range ap.da.Sources {
		names[i] = s.Name
	}
	for _, r := range pipeline.UnmatchedRules(ap.s.rules, names) {
		p.Notes = append(p.Notes, fmt.Sprintf("--alpha-rules rule %q matches no tensor of %s", r.Pattern+"="+strconv.FormatFloat(r.Value, 'g', -1, 64), a.A))
	}
	return nil
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
