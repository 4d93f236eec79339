package family

import (
	"regexp"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// Component is one recognised part of a checkpoint.
type Component struct {
	// Name is the part's family ID (sd1, sdxl, flux, wan, clip_l, t5xxl,
	// qwen3, vae, wan_vae, ...).
	Name string `json:"name"`
	// Kind is "diffusion", "text_encoder" or "vae".
	Kind string `json:"kind"`
	// Variant refines Name when the tensors tell ("dev", "refiner", "i2v",
	// "large", "open_clip", "diffusers"); empty otherwise.
	Variant string `json:"variant"`
	// Prefix is the name prefix the part's tensors share ("" for none).
	Prefix string `json:"prefix"`
	// Tensors, Params and Bytes count the tensors under Prefix.
	Tensors int   `json:"tensors"`
	Params  int64 `json:"params"`
	Bytes   int64 `json:"bytes"`
	// byPrefix reports that the name came from the prefix (prefixHints),
	// not from a rule that measured the tensors: sd.cpp, which reads
	// widths, does not see such a component as the named family.
	byPrefix bool
	// sdcppIfFailed reports that the rule's sdcppIf conditions fail: sd.cpp
	// names the family's version, not the variant's.
	sdcppIfFailed bool
}

// Family returns the component's table entry.
func (c Component) Family() *Family { return ByID(c.Name) }

// Architecture is the result of detection.
type Architecture struct {
	// Name is the diffusion model's family ID, or the only component's
	// name when there is no diffusion model, or "unknown".
	Name string `json:"name"`
	// Components lists the recognised parts in file order of their prefixes.
	Components []Component `json:"components"`
	// Unassigned counts tensors under no recognised component.
	Unassigned int `json:"unassigned_tensors"`
}

// Main returns the family the architecture is named after (nil for unknown).
func (a Architecture) Main() *Family { return ByID(a.Name) }

// Variant returns the main component's variant ("" when none).
func (a Architecture) Variant() string {
	for _, c := range a.Components {
		if c.Name == a.Name {
			return c.Variant
		}
	}
	return ""
}

// Of returns the family whose component holds the tensor called name: the
// component with the longest prefix that name starts with (an unprefixed
// component only when no prefixed one applies), else the main family. It is
// nil when nothing was recognised.
func (a Architecture) Of(name string) *Family {
	f, _ := a.component(name)
	return f
}

// Classify returns the family of the tensor called name and how that
// family treats it (Family.Classify on the name without its component's
// prefix).
func (a Architecture) Classify(name string, shape []int64) (*Family, Class) {
	f, prefix := a.component(name)
	return f, f.Classify(strings.TrimPrefix(name, prefix), shape)
}

// component finds the family and prefix of the tensor called name.
func (a Architecture) component(name string) (*Family, string) {
	best := -1
	for i, c := range a.Components {
		if strings.HasPrefix(name, c.Prefix) && (best < 0 || len(c.Prefix) > len(a.Components[best].Prefix)) {
			if c.Prefix == "" && prefixOf(name) != "" {
				continue
			}
			best = i
		}
	}
	if best >= 0 {
		return a.Components[best].Family(), a.Components[best].Prefix
	}
	return a.Main(), prefixOf(name)
}

// cond is one test of a detection rule: some tensor whose name (without the
// component prefix) matches re, with the given rank and dims, exists; or,
// when absent is set, none does. A cond with meta set tests the metadata
// instead: some descriptive value contains meta (case-insensitive).
type cond struct {
	re     *regexp.Regexp
	ndim   int     // 0: any rank
	dims   []int64 // nil: any; -1 entries match any size
	absent bool
	meta   string
}

func has(re string) cond { return cond{re: regexp.MustCompile(re)} }

func lacks(re string) cond { return cond{re: regexp.MustCompile(re), absent: true} }

func rank(re string, n int) cond { return cond{re: regexp.MustCompile(re), ndim: n} }

func shape(re string, dims ...int64) cond {
	return cond{re: regexp.MustCompile(re), ndim: len(dims), dims: dims}
}

// meta matches a model whose metadata describes it with the word w (the
// only way to tell variants whose tensors are identical, such as Flux
// Kontext from Flux dev).
func meta(w string) cond { return cond{meta: strings.ToLower(w)} }

// Rule recognises one variant of a family from its conditions.
type Rule struct {
	// Variant is what the rule finds ("" for the family in general).
	Variant string
	// SDCpp is sd.cpp's version name for the variant when it differs from
	// the family's ("flux-fill", "wan2.2-i2v").
	SDCpp string
	// SDCppAt, when set, replaces the family's SDCppAt for this variant
	// (sd.cpp reads a diffusers UNet under "unet.", an LDM one under
	// "model.diffusion_model.").
	SDCppAt []string
	conds   []cond
	// sdcppIf are conditions sd.cpp tests beyond the rule's own before it
	// names the variant's version (widths it multiplies in, which a
	// scaled-down model lacks); when they fail it names the family's.
	sdcppIf []cond
}

func rule(variant string, conds ...cond) Rule { return Rule{Variant: variant, conds: conds} }

// noSDCpp marks a variant sd.cpp has no version for.
const noSDCpp = "-"

// sd names the rule's sd.cpp version.
func (r Rule) sd(version string) Rule { r.SDCpp = version; return r }

// sdIf names the rule's sd.cpp version, which sd.cpp gives only when conds
// hold too.
func (r Rule) sdIf(version string, conds ...cond) Rule {
	r.SDCpp, r.sdcppIf = version, conds
	return r
}

// at sets where sd.cpp sees the variant.
func (r Rule) at(prefixes ...string) Rule { r.SDCppAt = prefixes; return r }

// SDCppFor returns sd.cpp's version name for a variant of f ("" when
// sd.cpp has none).
func (f *Family) SDCppFor(variant string) string {
	if f == nil {
		return ""
	}
	for _, r := range f.Detect {
		if r.Variant == variant && variant != "" && r.SDCpp != "" {
			if r.SDCpp == noSDCpp {
				return ""
			}
			return r.SDCpp
		}
	}
	return f.SDCpp
}

// rule is one row of the flattened detection table.
type flatRule struct {
	name, kind, variant string
	conds               []cond
	rule                *Rule
}

// rules is the detection table, flattened from Families.
var rules []flatRule

func buildRules() {
	for _, f := range Families {
		for i := range f.Detect {
			r := &f.Detect[i]
			rules = append(rules, flatRule{name: f.ID, kind: f.Kind, variant: r.Variant, conds: r.conds, rule: r})
		}
	}
	indexConds()
}

// prefixes are the component prefixes of single-file checkpoints (LDM,
// SGM, ComfyUI, stable-diffusion.cpp), longest alternatives first. Inner
// wrappers (transformer., model.) are part of the prefix.
var prefixes = []*regexp.Regexp{
	regexp.MustCompile(`^model\.diffusion_model\.`),
	regexp.MustCompile(`^diffusion_model\.`),
	regexp.MustCompile(`^first_stage_model\.`),
	regexp.MustCompile(`^vae\.`),
	regexp.MustCompile(`^cond_stage_model\.\d+\.(transformer\.|model\.)?`),
	regexp.MustCompile(`^net\.`),
	regexp.MustCompile(`^cond_stage_model\.(transformer\.|model\.)?`),
	regexp.MustCompile(`^conditioner\.embedders\.\d+\.(transformer\.|model\.)?`),
	regexp.MustCompile(`^text_encoders\.[A-Za-z0-9_]+\.(transformer\.)?`),
	regexp.MustCompile(`^text_encoder(_\d+)?\.`),
	regexp.MustCompile(`^unet\.`),
	// sd.cpp's loader names a diffusers folder's text encoders so.
	regexp.MustCompile(`^te\.1\.`),
	regexp.MustCompile(`^te\.`),
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
	{regexp.MustCompile(`^cond_stage_model\.1\.transformer\.$`), "clip", "clip_g"},
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

// metaKeys are the metadata keys whose values describe a model in words.
var metaKeys = []string{"modelspec.architecture", "modelspec.title", "modelspec.description", "general.name", "general.basename", "general.description"}

// Detect recognises the families and components of a checkpoint from its
// tensor names and shapes and, for variants that only metadata tells
// apart, from md (which may be nil).
func Detect(tensors []formats.Tensor, md formats.Metadata) Architecture {
	words := describe(md)
	tensors = logicalShapes(tensors, md)
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
		found := detectGroup(g, words)
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
			name := hintedName(g.prefix, r.name)
			arch.Components = append(arch.Components, Component{
				Name: name, Kind: r.kind, Variant: r.variant, Prefix: g.prefix,
				Tensors: len(g.tensors), Params: params, Bytes: bytes, byPrefix: name != r.name,
				sdcppIfFailed: !g.holds(r.rule.sdcppIf),
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

// logicalShapes gives tensors stored with another shape the shape that
// md's comfy.gguf.orig_shape keys record (a GGUF's Wan patch embedding is
// folded from 5-D to 4-D), so that a family is recognised by the shapes
// its rules are written for whatever the container. tensors is returned
// as it is when no key applies; otherwise a copy is changed.
func logicalShapes(tensors []formats.Tensor, md formats.Metadata) []formats.Tensor {
	var out []formats.Tensor
	var index map[string]int // built on the first key: keys times tensors could be 10^12
	for _, kv := range md {
		name, ok := strings.CutPrefix(kv.Key, gguf.OrigShapePrefix)
		if !ok {
			continue
		}
		if index == nil {
			index = make(map[string]int, len(tensors))
			for i := range tensors {
				index[tensors[i].Name] = i
			}
		}
		i, ok := index[name]
		a, isArray := kv.Value.(formats.Array)
		dims, _ := a.Values.([]int32)
		if !ok || !isArray || len(dims) == 0 {
			continue
		}
		shape := make([]int64, len(dims))
		for j, d := range dims {
			shape[j] = int64(d)
		}
		if n, err := formats.Elements(shape); err != nil || n != tensors[i].Elements() {
			continue // a key that does not fit the tensor describes nothing
		}
		if out == nil {
			out = slices.Clone(tensors)
		}
		out[i].Shape = shape
	}
	if out == nil {
		return tensors
	}
	return out
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

func indexConds() {
	idx := map[string]int{}
	for i, r := range rules {
		for j, c := range r.conds {
			if c.re == nil {
				continue
			}
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
func detectGroup(g *group, words string) []*flatRule {
	// hit[i][j] reports whether some tensor satisfies rule i's condition j
	// (before negation).
	hit := make([][]bool, len(rules))
	for i := range rules {
		hit[i] = make([]bool, len(rules[i].conds))
		for j, c := range rules[i].conds {
			if c.meta != "" {
				hit[i][j] = strings.Contains(words, c.meta)
			}
		}
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
	var out []*flatRule
	for _, k := range order {
		out = append(out, &rules[best[k]])
	}
	return out
}

// holds reports whether every condition holds on the group's tensors.
func (g *group) holds(conds []cond) bool {
	for _, c := range conds {
		found := false
		for _, t := range g.tensors {
			if c.re.MatchString(strings.TrimPrefix(t.Name, g.prefix)) && c.shapeMatches(t) {
				found = true
				break
			}
		}
		if found == c.absent {
			return false
		}
	}
	return true
}

// describe joins the descriptive metadata values, lower-cased.
func describe(md formats.Metadata) string {
	var b strings.Builder
	for _, k := range metaKeys {
		if v, ok := md.String(k); ok {
			b.WriteString(strings.ToLower(v))
			b.WriteByte('\n')
		}
	}
	return b.String()
}
