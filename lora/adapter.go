package lora

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quant"
)

// Kind is the algorithm of one adapter layer.
type Kind uint8

// Adapter kinds.
const (
	// LoRA is up·down (kohya LoRA, LoCon on convolutions, Tucker LoCon with
	// a mid kernel, DyLoRA, PEFT and diffusers LoRA).
	LoRA Kind = iota + 1
	// LoHa is LyCORIS's Hadamard product of two low-rank products.
	LoHa
	// LoKr is LyCORIS's Kronecker product of two (possibly low-rank) factors.
	LoKr
	// Full is a stored difference (LyCORIS "full", diff and diff_b).
	Full
)

var kindNames = map[Kind]string{LoRA: "lora", LoHa: "loha", LoKr: "lokr", Full: "full"}

// String returns the kind's short name ("lora", "loha", "lokr", "full").
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Layer is the change an adapter makes to one weight (or bias): its factors
// as stored, and the shape of the delta they multiply out to. The delta has
// Rows rows (the weight's first dimension) of Cols elements each.
type Layer struct {
	// Module is the adapted module's name as the file spells it
	// ("lora_unet_down_blocks_0_attentions_0_proj_in").
	Module string
	// Kind is the algorithm.
	Kind Kind
	// Bias reports a layer that changes the module's bias (a diff_b).
	Bias bool
	// Rank is the inner dimension of the factors (0 for Full and for a LoKr
	// of two full factors).
	Rank int64
	// Alpha is the stored alpha; HasAlpha reports whether there was one.
	Alpha    float64
	HasAlpha bool
	// Scale multiplies the product before the strength: alpha/rank, a
	// stored scale, or 1.
	Scale float64
	// Rows is the delta's first dimension (the output features).
	Rows int64
	// Cols is the number of elements in one row of the delta.
	Cols int64
	// Inner is the delta's shape after the first dimension when the factors
	// fix it ([in] or [in, kh, kw]); nil when they only fix Cols (LoHa and
	// LoKr store convolution factors flattened).
	Inner []int64
	// DoRA reports a weight-decomposed layer (dora_scale or PEFT's
	// lora_magnitude_vector): the magnitude of each output row is set
	// after the delta is added.
	DoRA bool
	// Keys lists every tensor name the layer is made of.
	Keys []string

	adapter *Adapter
	t       [numRoles]*formats.Tensor

	mu    sync.Mutex
	refs  int
	k     *kernel
	kErr  error
	ready bool
}

// Adapter is an opened adapter file: its layers, and what could not be made
// into a layer.
type Adapter struct {
	// Path is the file the adapter was read from.
	Path string
	// Layers lists the layers in the order of their first tensor in the file.
	Layers []*Layer
	// Refused lists modules of adapter kinds that are not a weight delta
	// (IA3, OFT, GLoRA, weight replacement) or that sdtool cannot bake.
	Refused []Refusal
	// Unknown lists tensors whose names are not adapter tensors (no known
	// suffix, or a scalar left over without the factors it belongs to).
	Unknown []string
	// Styles counts the layers per naming convention ("kohya", "peft",
	// "diffusers", "lycoris", "xlabs", "comfyui", "sdcpp").
	Styles map[string]int

	model formats.Model
	owned bool
}

// Refusal is a module the adapter holds but that cannot be applied.
type Refusal struct {
	// Module is the module name as stored.
	Module string
	// Keys lists its tensors.
	Keys []string
	// Reason says why ("IA3 (it scales activations, ...)").
	Reason string
}

// Open opens an adapter file in any container formats.Open reads (the
// caller links the format packages in, as the command does).
func Open(path string) (*Adapter, error) {
	m, err := formats.Open(path)
	if err != nil {
		return nil, err
	}
	a, err := Read(m)
	if err != nil {
		m.Close()
		return nil, err
	}
	a.owned = true
	return a, nil
}

// Close closes the file when Open opened it; an adapter from Read leaves
// its model to the caller.
func (a *Adapter) Close() error {
	if a.owned {
		return a.model.Close()
	}
	return nil
}

// Model returns the model the adapter reads its tensors from.
func (a *Adapter) Model() formats.Model { return a.model }

// Read makes an adapter of an opened model. It reads the tensor list and
// the scalars (alpha, scale) but no factor data; factors are read when a
// delta is computed. A layer whose factors do not fit together is an error
// that names the file, the tensors and their shapes.
func Read(m formats.Model) (*Adapter, error) {
	a := &Adapter{Path: m.Path(), model: m, Styles: map[string]int{}}
	type module struct {
		name   string
		first  int
		roles  map[Role]*formats.Tensor
		keys   []string
		styles map[string]bool
		refuse string
	}
	mods := map[string]*module{}
	var order []*module
	tensors := m.Tensors()
	var plain []int // tensors without an adapter suffix
	for i := range tensors {
		t := &tensors[i]
		s, ok := findSuffix(t.Name)
		if !ok {
			plain = append(plain, i)
			continue
		}
		name := t.Name[:len(t.Name)-len(s.text)]
		mod := mods[name]
		if mod == nil {
			mod = &module{name: name, first: i, roles: map[Role]*formats.Tensor{}, styles: map[string]bool{}}
			mods[name] = mod
			order = append(order, mod)
		}
		mod.keys = append(mod.keys, t.Name)
		if s.style != "" {
			mod.styles[s.style] = true
		}
		if s.role == RoleRefused {
			if mod.refuse == "" {
				mod.refuse = s.refuse
			}
			continue
		}
		if prev, dup := mod.roles[s.role]; dup {
			return nil, fmt.Errorf("%s: tensors %q and %q are both the %s of module %q", a.Path, prev.Name, t.Name, s.role, name)
		}
		mod.roles[s.role] = t
	}
	// An IA3 module stores its vector as "<module>.weight": claim it.
	for _, i := range plain {
		name := tensors[i].Name
		if mod := mods[strings.TrimSuffix(name, ".weight")]; mod != nil && mod.refuse != "" && strings.HasSuffix(name, ".weight") {
			mod.keys = append(mod.keys, name)
			continue
		}
		a.Unknown = append(a.Unknown, name)
	}
	var errs []error
	for _, mod := range order {
		if mod.refuse != "" {
			a.Refused = append(a.Refused, Refusal{Module: mod.name, Keys: mod.keys, Reason: mod.refuse})
			continue
		}
		layers, leftover, err := a.makeLayers(mod.name, mod.roles)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(layers) == 0 {
			a.Unknown = append(a.Unknown, mod.keys...)
			continue
		}
		a.Unknown = append(a.Unknown, leftover...)
		style := styleOf(mod.name, mod.styles)
		for _, l := range layers {
			a.Styles[style]++
			a.Layers = append(a.Layers, l)
		}
	}
	if len(errs) > 0 {
		if len(errs) > 8 {
			errs = append(errs[:8], fmt.Errorf("... and %d more", len(errs)-8))
		}
		return nil, errors.Join(errs...)
	}
	return a, nil
}

// styleOf names a layer's convention from its key suffixes and module name.
func styleOf(module string, styles map[string]bool) string {
	switch {
	case styles["sdcpp"]:
		return "sdcpp"
	case styles["lycoris"] || strings.HasPrefix(module, "lycoris_"):
		return "lycoris"
	case strings.HasPrefix(module, "lora_"):
		return "kohya"
	case styles["xlabs"]:
		return "xlabs"
	case styles["peft"]:
		return "peft"
	case styles["diffusers"]:
		return "diffusers"
	case strings.HasPrefix(module, "diffusion_model.") || strings.HasPrefix(module, "text_encoders."):
		return "comfyui"
	}
	return "kohya"
}

// makeLayers builds the layers of one module from its tensors by role. The
// keys it did not use are returned as leftover.
func (a *Adapter) makeLayers(module string, roles map[Role]*formats.Tensor) ([]*Layer, []string, error) {
	used := map[Role]bool{}
	take := func(rs ...Role) {
		for _, r := range rs {
			if roles[r] != nil {
				used[r] = true
			}
		}
	}
	var layers []*Layer
	newLayer := func(k Kind, bias bool, rs ...Role) *Layer {
		l := &Layer{Module: module, Kind: k, Bias: bias, adapter: a, Scale: 1}
		for _, r := range rs {
			if t := roles[r]; t != nil {
				l.t[r] = t
				l.Keys = append(l.Keys, t.Name)
			}
		}
		take(rs...)
		layers = append(layers, l)
		return l
	}
	has := func(r Role) bool { return roles[r] != nil }
	lowRank := has(RoleUp) || has(RoleDown)
	loha := has(RoleHadaW1A) || has(RoleHadaW1B) || has(RoleHadaW2A) || has(RoleHadaW2B)
	lokr := has(RoleLoKrW1) || has(RoleLoKrW1A) || has(RoleLoKrW2) || has(RoleLoKrW2A) || has(RoleLoKrW1B) || has(RoleLoKrW2B)
	n := 0
	for _, b := range []bool{lowRank, loha, lokr, has(RoleDiff)} {
		if b {
			n++
		}
	}
	if n > 1 {
		return nil, nil, fmt.Errorf("%s: module %q mixes the factors of several adapter kinds", a.Path, module)
	}
	switch {
	case lowRank:
		newLayer(LoRA, false, RoleUp, RoleDown, RoleMid)
	case loha:
		newLayer(LoHa, false, RoleHadaW1A, RoleHadaW1B, RoleHadaW2A, RoleHadaW2B, RoleHadaT1, RoleHadaT2)
	case lokr:
		newLayer(LoKr, false, RoleLoKrW1, RoleLoKrW1A, RoleLoKrW1B, RoleLoKrW2, RoleLoKrW2A, RoleLoKrW2B, RoleLoKrT1, RoleLoKrT2)
	case has(RoleDiff):
		newLayer(Full, false, RoleDiff)
	}
	if has(RoleDiffBias) {
		newLayer(Full, true, RoleDiffBias)
	}
	if len(layers) == 0 {
		return nil, nil, nil
	}
	w := layers[0]
	if !w.Bias {
		// The scalars and the DoRA magnitude belong to the weight's layer.
		for _, r := range []Role{RoleAlpha, RoleScale, RoleDoRA} {
			if t := roles[r]; t != nil {
				w.t[r] = t
				w.Keys = append(w.Keys, t.Name)
				used[r] = true
			}
		}
	}
	for _, l := range layers {
		if err := l.shape(); err != nil {
			return nil, nil, err
		}
		if err := l.readScalars(); err != nil {
			return nil, nil, err
		}
	}
	var leftover []string
	for r, t := range roles {
		if !used[r] {
			leftover = append(leftover, t.Name)
		}
	}
	sort.Strings(leftover)
	return layers, leftover, nil
}

// errf formats an error about one of the layer's tensors.
func (l *Layer) errf(format string, args ...any) error {
	return fmt.Errorf("%s: module %q: %s", l.adapter.Path, l.Module, fmt.Sprintf(format, args...))
}

func (l *Layer) tensor(r Role) *formats.Tensor { return l.t[r] }

// desc names a tensor with its shape, for errors.
func desc(t *formats.Tensor) string { return fmt.Sprintf("%q %v", t.Name, t.Shape) }

// need returns the tensor of role r with at least min dimensions, all
// positive.
func (l *Layer) need(r Role, min int) (*formats.Tensor, error) {
	t := l.t[r]
	if t == nil {
		return nil, l.errf("%s %s has no %s tensor", l.Kind, roleList(l), r)
	}
	if len(t.Shape) < min {
		return nil, l.errf("tensor %s has %d dimensions, the %s needs at least %d", desc(t), len(t.Shape), r, min)
	}
	for _, d := range t.Shape {
		if d <= 0 {
			return nil, l.errf("tensor %s has an empty dimension", desc(t))
		}
	}
	if !t.Type.Info().Float && !t.Type.Quantized() {
		return nil, l.errf("tensor %s is %s, not a float type", desc(t), t.Type)
	}
	return t, nil
}

func roleList(l *Layer) string {
	var s []string
	for r, t := range l.t {
		if t != nil {
			s = append(s, Role(r).String())
		}
	}
	return "(" + strings.Join(s, ", ") + ")"
}

func prod(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// ones reports whether every dimension of s is 1.
func ones(s []int64) bool {
	for _, d := range s {
		if d != 1 {
			return false
		}
	}
	return true
}

// shape checks that the factors fit together and sets Rank, Rows, Cols
// and Inner.
func (l *Layer) shape() error {
	switch l.Kind {
	case LoRA:
		return l.shapeLoRA()
	case LoHa:
		return l.shapeLoHa()
	case LoKr:
		return l.shapeLoKr()
	case Full:
		r := RoleDiff
		if l.Bias {
			r = RoleDiffBias
		}
		t, err := l.need(r, 0)
		if err != nil {
			return err
		}
		l.Rows, l.Inner = 1, nil
		if len(t.Shape) > 0 {
			l.Rows, l.Inner = t.Shape[0], append([]int64{}, t.Shape[1:]...)
		}
		l.Cols = prod(l.Inner)
		return nil
	}
	return l.errf("unknown kind")
}

func (l *Layer) shapeLoRA() error {
	up, err := l.need(RoleUp, 2)
	if err != nil {
		return err
	}
	down, err := l.need(RoleDown, 2)
	if err != nil {
		return err
	}
	if !ones(up.Shape[2:]) {
		return l.errf("up %s is not a 1x1 kernel", desc(up))
	}
	l.Rank, l.Rows = down.Shape[0], up.Shape[0]
	inner := append([]int64{}, down.Shape[1:]...)
	if mid := l.t[RoleMid]; mid != nil {
		if _, err := l.need(RoleMid, 2); err != nil {
			return err
		}
		if mid.Shape[0] != up.Shape[1] || mid.Shape[1] != down.Shape[0] {
			return l.errf("mid %s does not join up %s and down %s", desc(mid), desc(up), desc(down))
		}
		if !ones(down.Shape[2:]) {
			return l.errf("down %s of a Tucker layer is not a 1x1 kernel", desc(down))
		}
		inner = append([]int64{down.Shape[1]}, mid.Shape[2:]...)
	} else if up.Shape[1] != down.Shape[0] {
		return l.errf("up %s and down %s disagree on the rank", desc(up), desc(down))
	}
	l.Inner, l.Cols = inner, prod(inner)
	return nil
}

func (l *Layer) shapeLoHa() error {
	var rows, cols [2]int64
	var inner [2][]int64
	for k, rs := range [2][3]Role{{RoleHadaW1A, RoleHadaW1B, RoleHadaT1}, {RoleHadaW2A, RoleHadaW2B, RoleHadaT2}} {
		wa, err := l.need(rs[0], 2)
		if err != nil {
			return err
		}
		wb, err := l.need(rs[1], 2)
		if err != nil {
			return err
		}
		if t := l.t[rs[2]]; t != nil {
			// Tucker: t [r, r, k...], wa [r, out], wb [r, in].
			if _, err := l.need(rs[2], 2); err != nil {
				return err
			}
			if len(wa.Shape) != 2 || len(wb.Shape) != 2 || t.Shape[0] != wa.Shape[0] || t.Shape[1] != wb.Shape[0] {
				return l.errf("Tucker factors %s, %s and %s do not fit", desc(t), desc(wa), desc(wb))
			}
			rows[k] = wa.Shape[1]
			inner[k] = append([]int64{wb.Shape[1]}, t.Shape[2:]...)
		} else {
			if len(wa.Shape) != 2 || wa.Shape[1] != wb.Shape[0] {
				return l.errf("factors %s and %s disagree on the rank", desc(wa), desc(wb))
			}
			rows[k] = wa.Shape[0]
			inner[k] = append([]int64{}, wb.Shape[1:]...)
		}
		cols[k] = prod(inner[k])
		if k == 0 {
			l.Rank = wb.Shape[0]
		}
	}
	if (l.t[RoleHadaT1] == nil) != (l.t[RoleHadaT2] == nil) {
		return l.errf("has only one of hada_t1 and hada_t2")
	}
	if rows[0] != rows[1] || cols[0] != cols[1] {
		return l.errf("the two Hadamard factors give %dx%d and %dx%d", rows[0], cols[0], rows[1], cols[1])
	}
	l.Rows, l.Cols = rows[0], cols[0]
	if len(inner[0]) > 1 {
		l.Inner = inner[0]
	} else if len(inner[1]) > 1 {
		l.Inner = inner[1]
	}
	return nil
}

func (l *Layer) shapeLoKr() error {
	// w1: [a, c] or w1_a [a, r] · w1_b [r, c]; never both (which one
	// would apply is a guess), and the same for w2.
	for _, w := range []struct {
		full  Role
		parts [2]Role
		name  string
	}{{RoleLoKrW1, [2]Role{RoleLoKrW1A, RoleLoKrW1B}, "lokr_w1"}, {RoleLoKrW2, [2]Role{RoleLoKrW2A, RoleLoKrW2B}, "lokr_w2"}} {
		if l.t[w.full] != nil && (l.t[w.parts[0]] != nil || l.t[w.parts[1]] != nil) {
			return l.errf("has both %s and its factors %s_a/%s_b; one of them must go", w.name, w.name, w.name)
		}
	}
	var a, c int64
	if w1 := l.t[RoleLoKrW1]; w1 != nil {
		if _, err := l.need(RoleLoKrW1, 2); err != nil {
			return err
		}
		if len(w1.Shape) != 2 {
			return l.errf("lokr_w1 %s is not a matrix", desc(w1))
		}
		a, c = w1.Shape[0], w1.Shape[1]
	} else {
		wa, err := l.need(RoleLoKrW1A, 2)
		if err != nil {
			return err
		}
		wb, err := l.need(RoleLoKrW1B, 2)
		if err != nil {
			return err
		}
		if len(wa.Shape) != 2 || len(wb.Shape) != 2 || wa.Shape[1] != wb.Shape[0] {
			return l.errf("lokr_w1 factors %s and %s disagree on the rank", desc(wa), desc(wb))
		}
		a, c = wa.Shape[0], wb.Shape[1]
		l.Rank = wb.Shape[0]
	}
	// w2: [b, d, k...], w2_a [b, r] · w2_b [r, D...], or Tucker
	// t2 [r, r, k...] with w2_a [r, b] and w2_b [r, d].
	var b int64
	var inner2 []int64
	if w2 := l.t[RoleLoKrW2]; w2 != nil {
		if _, err := l.need(RoleLoKrW2, 2); err != nil {
			return err
		}
		b, inner2 = w2.Shape[0], w2.Shape[1:]
	} else {
		wa, err := l.need(RoleLoKrW2A, 2)
		if err != nil {
			return err
		}
		wb, err := l.need(RoleLoKrW2B, 2)
		if err != nil {
			return err
		}
		if t := l.t[RoleLoKrT2]; t != nil {
			if _, err := l.need(RoleLoKrT2, 2); err != nil {
				return err
			}
			if len(wa.Shape) != 2 || len(wb.Shape) != 2 || t.Shape[0] != wa.Shape[0] || t.Shape[1] != wb.Shape[0] {
				return l.errf("Tucker factors %s, %s and %s do not fit", desc(t), desc(wa), desc(wb))
			}
			b, inner2 = wa.Shape[1], append([]int64{wb.Shape[1]}, t.Shape[2:]...)
		} else {
			if len(wa.Shape) != 2 || wa.Shape[1] != wb.Shape[0] {
				return l.errf("lokr_w2 factors %s and %s disagree on the rank", desc(wa), desc(wb))
			}
			b, inner2 = wa.Shape[0], wb.Shape[1:]
		}
		l.Rank = wb.Shape[0]
	}
	if l.t[RoleLoKrT1] != nil {
		return l.errf("lokr_t1 (a Tucker core for w1) is not supported")
	}
	l.Rows = a * b
	l.Cols = c * prod(inner2)
	if len(inner2) > 1 {
		l.Inner = append([]int64{c * inner2[0]}, inner2[1:]...)
	}
	return nil
}

// readScalars reads alpha and scale and sets Scale the way sd.cpp and
// ComfyUI do: alpha/rank when there is an alpha and a rank, a stored scale
// instead of alpha, 1 otherwise (and always 1 for a LoKr of two full
// factors, whose alpha LyCORIS sets to the rank it does not have).
func (l *Layer) readScalars() error {
	if t := l.t[RoleAlpha]; t != nil {
		v, err := l.scalar(t)
		if err != nil {
			return err
		}
		l.Alpha, l.HasAlpha = v, true
	}
	l.Scale = 1
	switch {
	case l.t[RoleScale] != nil:
		v, err := l.scalar(l.t[RoleScale])
		if err != nil {
			return err
		}
		l.Scale = v
	case l.HasAlpha && l.Rank > 0 && l.Kind != Full:
		l.Scale = l.Alpha / float64(l.Rank)
	}
	if d := l.t[RoleDoRA]; d != nil {
		// Only a magnitude per output row can be applied while the rows
		// stream; LyCORIS's input-axis variant needs every row first.
		if len(d.Shape) == 0 || d.Shape[0] != l.Rows || prod(d.Shape) != l.Rows {
			return l.errf("dora_scale %s is not one value per output row (%d); column-wise DoRA is not supported", desc(d), l.Rows)
		}
		l.DoRA = true
	}
	return nil
}

// scalar reads a one-element tensor as a float.
func (l *Layer) scalar(t *formats.Tensor) (float64, error) {
	if t.Elements() != 1 {
		return 0, l.errf("tensor %s is not a scalar", desc(t))
	}
	if t.Type == formats.Bool {
		return 0, l.errf("tensor %q is a bool, not a number", t.Name)
	}
	v, err := readFloats(l.adapter.model, t)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(float64(v[0])) || math.IsInf(float64(v[0]), 0) {
		return 0, l.errf("tensor %q is %v", t.Name, v[0])
	}
	return float64(v[0]), nil
}

// readFloats reads a whole tensor and decodes it to float32.
func readFloats(m formats.Model, t *formats.Tensor) ([]float32, error) {
	n, err := formats.Elements(t.Shape)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	if want, err := t.Type.Bytes(t.Shape); err != nil || want != t.Size {
		return nil, fmt.Errorf("%s: tensor %q: %v holds %d bytes, not what %s %v needs", t.File, t.Name, t.Shape, t.Size, t.Type, t.Shape)
	}
	raw, err := formats.ReadTensor(m, t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	if err := quant.DecodeFloats(t.Type, out, raw); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	return out, nil
}
