package lora

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/names"
	"github.com/sdtool/sdtool/quant"
)

// ExtractOptions say how much of each layer's difference to keep.
type ExtractOptions struct {
	// Rank keeps this many singular values per layer (capped by the
	// layer's size). Zero selects Energy.
	Rank int
	// Energy keeps the fewest singular values whose squares sum to at least
	// this share (0 < Energy ≤ 1) of the difference's squared Frobenius
	// norm, up to MaxRank.
	Energy float64
	// MaxRank caps the rank Energy may choose (default 128): the sketch
	// computes that many singular values, no more.
	MaxRank int
	// Oversample is the number of extra sketch directions (default 8) and
	// PowerIters the number of power iterations (default 2); both trade
	// time for accuracy of the leading singular values.
	Oversample, PowerIters int
	// Seed makes the random sketch reproducible; each layer mixes its name
	// in, so the output does not depend on the order layers are computed in.
	Seed uint64
	// Workers bounds the goroutines of one decomposition (0: GOMAXPROCS).
	Workers int
}

func (o ExtractOptions) check() error {
	switch {
	case o.Rank < 0:
		return fmt.Errorf("lora: rank %d is negative", o.Rank)
	case o.Rank == 0 && !(o.Energy > 0 && o.Energy <= 1):
		return fmt.Errorf("lora: give a rank or an energy share in (0, 1], not %v", o.Energy)
	case o.MaxRank < 0 || o.Oversample < 0 || o.PowerIters < 0:
		return fmt.Errorf("lora: negative MaxRank, Oversample or PowerIters")
	}
	return nil
}

// Source is a row range of one checkpoint tensor.
type Source struct {
	// Name is the tensor's name as both checkpoints store it.
	Name string
	// Row0 and Rows select rows of its first dimension.
	Row0, Rows int64
}

// ExtractLayer is one LoRA module to extract: a weight of the checkpoints
// (or rows of one, or several weights joined), named the way kohya's
// scripts name that module for the family.
type ExtractLayer struct {
	// Module is the kohya module name ("lora_unet_down_blocks_0_attentions_0_proj_in").
	Module string
	// Sources are the rows the layer is made of, stacked in order. A
	// checkpoint that fuses what kohya splits (open_clip's in_proj) gives
	// several layers of one tensor; one that splits what kohya fuses (a
	// diffusers Flux to_q, to_k, to_v for the BFL qkv) gives one layer of
	// several tensors.
	Sources []Source
	// Rows and Inner are the shape of the layer's matrix: Rows rows shaped
	// Inner ([in] for a linear layer, [in, kh, kw] for a convolution).
	Rows  int64
	Inner []int64
	// SDCpp reports whether stable-diffusion.cpp's LoRA name conversion
	// maps Module back to these tensors (it cannot for a few modules
	// outside the transformer blocks, such as Flux's img_in); ComfyUI maps
	// every kohya name of a model tensor.
	SDCpp bool
}

// Cols returns the number of elements in one row of the layer.
func (l *ExtractLayer) Cols() int64 { return prod(l.Inner) }

// Conv reports a convolution (its factors are stored as kernels).
func (l *ExtractLayer) Conv() bool { return len(l.Inner) > 1 }

// ExtractPlan lists the layers to extract from two checkpoints.
type ExtractPlan struct {
	// Version is the family the names were made for.
	Version names.Version
	// Layers are in the checkpoints' tensor order.
	Layers []ExtractLayer
	// Skipped lists the tensors that are not extracted and why.
	Skipped []string
}

// extractHeads name the kohya head of each part of a model, by the
// canonical prefix of its tensors; the first row that applies wins (SDXL's
// first CLIP is lora_te1_, SD 1.x's and 2.x's only CLIP lora_te_).
var extractHeads = []struct {
	prefix, head string
	when         func(names.Version) bool
}{
	{"model.diffusion_model.", "lora_unet_", nil},
	{"cond_stage_model.transformer.", "lora_te1_", names.Version.IsSDXL},
	{"cond_stage_model.transformer.", "lora_te_", nil},
	{"cond_stage_model.1.transformer.", "lora_te2_", nil},
	{"text_encoders.clip_l.transformer.", "lora_te1_", nil},
	{"text_encoders.clip_g.transformer.", "lora_te2_", nil},
	{"text_encoders.t5xxl.transformer.", "lora_te3_", nil},
}

// diffusersUNetNames says which UNet families kohya names by diffusers
// modules: sd-scripts' SD 1.x/2.x UNet mirrors diffusers, its SDXL UNet
// keeps the original LDM names.
var diffusersUNetNames = []func(names.Version) bool{names.Version.IsSD1, names.Version.IsSD2}

// extractSkip are weights no LoRA trainer adapts (embedding tables).
var extractSkip = []string{"token_embedding", "position_embedding", "embed_tokens", "shared.weight", "relative_attention_bias"}

// PlanExtract pairs the weights of base a and tuned b (tensor lists of two
// checkpoints of version v, stored names; prefix as for NewBase) and names
// a kohya module for each. Matrices (2-D) and convolutions (4-D) of the
// diffusion model and the text encoders are extracted; a weight only in
// one checkpoint is skipped, one whose shapes differ is an error.
func PlanExtract(a, b []formats.Tensor, v names.Version, prefix string) (*ExtractPlan, error) {
	base, err := NewBase(a, v, prefix)
	if err != nil {
		return nil, err
	}
	inB := map[string]*formats.Tensor{}
	for i := range b {
		inB[b[i].Name] = &b[i]
	}
	plan := &ExtractPlan{Version: v}
	var errs []error
	eligible := map[int]bool{}
	for i := range a {
		t := &a[i]
		bt := inB[t.Name]
		switch {
		case bt == nil:
			plan.Skipped = append(plan.Skipped, fmt.Sprintf("%s: not in the tuned checkpoint", t.Name))
			continue
		case !sameShape(t.Shape, bt.Shape):
			errs = append(errs, fmt.Errorf("tensor %q: shape %v in the base, %v in the tuned checkpoint", t.Name, t.Shape, bt.Shape))
			continue
		}
		c := base.tensors[i].canon
		switch {
		case !strings.HasSuffix(base.tensors[i].group, ".weight") || len(t.Shape) != 2 && len(t.Shape) != 4:
			continue // biases, norms, embeddings of other ranks: not LoRA targets
		case headFor(c, v) == "":
			plan.Skipped = append(plan.Skipped, fmt.Sprintf("%s: not in the diffusion model or a text encoder", t.Name))
			continue
		case containsAny(c, extractSkip):
			plan.Skipped = append(plan.Skipped, fmt.Sprintf("%s: an embedding table", t.Name))
			continue
		}
		eligible[i] = true
	}
	inA := map[string]bool{}
	for i := range a {
		inA[a[i].Name] = true
	}
	for i := range b {
		if !inA[b[i].Name] {
			plan.Skipped = append(plan.Skipped, fmt.Sprintf("%s: not in the base checkpoint", b[i].Name))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	done := map[string]bool{}
	for i := range a {
		if !eligible[i] {
			continue
		}
		bt := base.tensors[i]
		if done[bt.group] {
			continue
		}
		done[bt.group] = true
		layers, err := base.extractLayers(bt.group, eligible)
		if err != nil {
			return nil, err
		}
		plan.Layers = append(plan.Layers, layers...)
	}
	return plan, nil
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// headFor returns the kohya head of a canonical name, or "".
func headFor(c string, v names.Version) string {
	for _, h := range extractHeads {
		if strings.HasPrefix(c, h.prefix) && (h.when == nil || h.when(v)) {
			return h.head
		}
	}
	return ""
}

// extractLayers names the layers of one canonical group.
func (b *Base) extractLayers(g string, eligible map[int]bool) ([]ExtractLayer, error) {
	parts := b.groups[g]
	for _, i := range parts {
		if i < 0 || !eligible[i] {
			return nil, fmt.Errorf("lora: %q is stored in parts, not all of which are extractable", g)
		}
	}
	first := b.tensors[parts[0]]
	inner := append([]int64{}, first.shape[1:]...)
	var layers []ExtractLayer
	var wantPart []int
	if len(parts) == 1 {
		// A fused tensor kohya splits: one layer per part, in equal row ranges.
		split := splitAliases(g)
		for _, al := range split {
			rows := first.rowsOf() / int64(len(split))
			layers = append(layers, ExtractLayer{Sources: []Source{{first.name, int64(al.part) * rows, rows}}, Rows: rows, Inner: inner,
				Module: b.kohyaModule(strings.TrimSuffix(g, al.to) + al.from)})
			wantPart = append(wantPart, al.part)
		}
		if layers == nil {
			layers = append(layers, ExtractLayer{Sources: []Source{{first.name, 0, first.rowsOf()}}, Rows: first.rowsOf(), Inner: inner,
				Module: b.kohyaModule(g)})
		}
	} else {
		l := ExtractLayer{Inner: inner, Module: b.kohyaModule(g)}
		for _, i := range parts {
			t := b.tensors[i]
			if !sameShape(t.shape[1:], inner) {
				return nil, fmt.Errorf("lora: parts of %q have rows of different shapes", g)
			}
			l.Sources = append(l.Sources, Source{t.name, 0, t.rowsOf()})
			l.Rows += t.rowsOf()
		}
		layers = append(layers, l)
	}
	for k := range layers {
		l := &layers[k]
		if l.Module == "" {
			return nil, fmt.Errorf("lora: no kohya name for %q", g)
		}
		// The name must come back to the same tensor rows through this
		// package's own matching; sd.cpp's conversion is reported.
		h, err := b.resolve(&Layer{Module: l.Module})
		if err != nil || h.group != g || wantPart != nil && h.part != wantPart[k] {
			return nil, fmt.Errorf("lora: internal: module %q for %q resolves to %q (%v)", l.Module, g, h.group, err)
		}
		if sh, ok := b.trySDCpp(l.Module, "weight"); ok && sh == h {
			l.SDCpp = true
		}
	}
	return layers, nil
}

// splitAliases returns the aliases whose fused name ends g ("in_proj"),
// in part order, or nil.
func splitAliases(g string) []alias {
	var out []alias
	for _, a := range aliases {
		if strings.HasSuffix(g, a.to) && strings.HasSuffix(a.to, ".weight") {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].part < out[j].part })
	return out
}

// kohyaModule names the module of canonical weight name c as kohya does.
func (b *Base) kohyaModule(c string) string {
	head := headFor(c, b.Version)
	var rest string
	for _, h := range extractHeads {
		if strings.HasPrefix(c, h.prefix) {
			rest = c[len(h.prefix):]
			break
		}
	}
	if head == "lora_unet_" {
		for _, is := range diffusersUNetNames {
			if is(b.Version) {
				d, ok := names.DiffusersUNetName(rest, b.Version)
				if !ok {
					break
				}
				rest = d
			}
		}
	}
	rest = strings.TrimSuffix(rest, ".weight")
	return head + strings.ReplaceAll(rest, ".", "_")
}

// Diff reads the layer's rows from both checkpoints and returns tuned −
// base as float32, Rows × Cols row-major. It reads in chunks of rows, so
// that besides the result only a few rows of each checkpoint are in
// memory.
func (l *ExtractLayer) Diff(base, tuned formats.Model) ([]float32, error) {
	cols := l.Cols()
	out := make([]float32, l.Rows*cols)
	chunk := max(1, (1<<20)/cols) // rows per read: about 4 MiB of floats
	var off int64
	for _, s := range l.Sources {
		ta, err := findTensor(base, s.Name)
		if err != nil {
			return nil, err
		}
		tb, err := findTensor(tuned, s.Name)
		if err != nil {
			return nil, err
		}
		var ra, rb rowReader
		for r := int64(0); r < s.Rows; r += chunk {
			n := min(chunk, s.Rows-r)
			a, err := ra.read(base, ta, s.Row0+r, n, cols)
			if err != nil {
				return nil, err
			}
			b, err := rb.read(tuned, tb, s.Row0+r, n, cols)
			if err != nil {
				return nil, err
			}
			dst := out[(off+r)*cols : (off+r+n)*cols]
			for i := range dst {
				dst[i] = b[i] - a[i]
			}
		}
		off += s.Rows
	}
	return out, nil
}

func findTensor(m formats.Model, name string) (*formats.Tensor, error) {
	t, ok := formats.Find(m, name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", m.Path(), name)
	}
	if want, err := t.Type.Bytes(t.Shape); err != nil || want != t.Size {
		return nil, fmt.Errorf("%s: tensor %q: %v holds %d bytes, not what %s %v needs", t.File, t.Name, t.Shape, t.Size, t.Type, t.Shape)
	}
	return &t, nil
}

// rowReader reads rows of a tensor as float32 into buffers it reuses.
type rowReader struct {
	raw  []byte
	vals []float32
}

func (rr *rowReader) read(m formats.Model, t *formats.Tensor, first, n, cols int64) ([]float32, error) {
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	if int64(cap(rr.raw)) < n*rb {
		rr.raw, rr.vals = make([]byte, n*rb), make([]float32, n*cols)
	}
	raw, vals := rr.raw[:n*rb], rr.vals[:n*cols]
	if err := formats.ReadFull(m, t, raw, first*rb); err != nil {
		return nil, err
	}
	if err := quant.DecodeFloats(t.Type, vals, raw); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	return vals, nil
}

// Decomposition is the low-rank approximation of one layer's difference:
// D ≈ Up·Down with Up = U·Σ [rows, rank] and Down = Vᵀ [rank, cols].
type Decomposition struct {
	// Rank is the number of singular values kept (0 for a zero difference).
	Rank int
	// Up and Down are row-major.
	Up, Down []float32
	// Sigma are the kept singular values, largest first.
	Sigma []float64
	// Norm is the Frobenius norm of the difference.
	Norm float64
	// Kept is the share of Norm² the kept singular values hold (1 for a
	// zero difference).
	Kept float64
}

// Rank returns the rank Decompose gives the layer with a fixed Rank
// option (capped by the layer's size), so that a writer can lay out the
// output before decomposing; with Energy the rank is known only after.
func (l *ExtractLayer) Rank(opt ExtractOptions) int {
	if opt.Rank <= 0 {
		return 0
	}
	return int(min(int64(opt.Rank), l.Rows, l.Cols()))
}

// Decompose computes the truncated SVD of d (rows × cols, row-major) that
// opt asks for. With a fixed Rank the result has exactly min(Rank, rows,
// cols) ranks (zero factors where the difference has fewer); with Energy
// it has the fewest that reach the share (none for a zero difference).
// name seeds the sketch.
func Decompose(d []float32, rows, cols int, name string, opt ExtractOptions) (*Decomposition, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	if rows <= 0 || cols <= 0 || len(d) != rows*cols {
		return nil, fmt.Errorf("lora: %s: %d values for %dx%d", name, len(d), rows, cols)
	}
	var norm2 float64
	for _, x := range d {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("lora: %s: the difference holds %v", name, x)
		}
		norm2 += float64(x) * float64(x)
	}
	out := &Decomposition{Norm: math.Sqrt(norm2), Kept: 1}
	k := opt.Rank
	if k == 0 {
		k = opt.MaxRank
		if k == 0 {
			k = 128
		}
	}
	k = min(k, rows, cols)
	if norm2 == 0 {
		if opt.Rank > 0 {
			out.Rank, out.Sigma = k, make([]float64, k)
			out.Up, out.Down = make([]float32, rows*k), make([]float32, k*cols)
		}
		return out, nil
	}
	over, power := opt.Oversample, opt.PowerIters
	if over == 0 {
		over = 8
	}
	if power == 0 {
		power = 2
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	s := randomizedSVD(d, rows, cols, k, svdOptions{oversample: over, power: power, seed: opt.Seed ^ h.Sum64(), workers: opt.Workers})
	r := s.k
	var acc float64
	if opt.Rank == 0 {
		// The difference is float32: its squared norm and the sum of the
		// squared singular values agree to about 1e-7, and singular values
		// below 1e-7 of the largest are rounding, not signal.
		goal := opt.Energy * norm2 * (1 - 1e-6)
		for r = 0; r < s.k && acc < goal && s.s[r] > 1e-7*s.s[0]; r++ {
			acc += s.s[r] * s.s[r]
		}
	} else {
		for i := 0; i < r; i++ {
			acc += s.s[i] * s.s[i]
		}
	}
	out.Rank, out.Sigma, out.Kept = r, append([]float64{}, s.s[:r]...), math.Min(1, acc/norm2)
	out.Up, out.Down = make([]float32, rows*r), make([]float32, r*cols)
	for i := 0; i < rows; i++ {
		for c := 0; c < r; c++ {
			out.Up[i*r+c] = float32(s.u[i*s.k+c] * s.s[c])
		}
	}
	for j := 0; j < cols; j++ {
		for c := 0; c < r; c++ {
			out.Down[c*cols+j] = float32(s.v[j*s.k+c])
		}
	}
	return out, nil
}

// Differs reports whether the layer's rows differ at all between the two
// checkpoints (compared as stored, byte for byte, in chunks), so that a
// writer can leave unchanged layers out before it lays out the output.
func (l *ExtractLayer) Differs(base, tuned formats.Model) (bool, error) {
	for _, s := range l.Sources {
		ta, err := findTensor(base, s.Name)
		if err != nil {
			return false, err
		}
		tb, err := findTensor(tuned, s.Name)
		if err != nil {
			return false, err
		}
		if ta.Type != tb.Type {
			return true, nil
		}
		rb, err := ta.Type.RowBytes(l.Cols())
		if err != nil {
			return false, fmt.Errorf("%s: tensor %q: %v", ta.File, ta.Name, err)
		}
		const chunk = 1 << 22
		a, b := make([]byte, min(chunk, s.Rows*rb)), make([]byte, min(chunk, s.Rows*rb))
		for off, end := s.Row0*rb, (s.Row0+s.Rows)*rb; off < end; off += int64(len(a)) {
			n := min(int64(len(a)), end-off)
			if err := formats.ReadFull(base, ta, a[:n], off); err != nil {
				return false, err
			}
			if err := formats.ReadFull(tuned, tb, b[:n], off); err != nil {
				return false, err
			}
			if string(a[:n]) != string(b[:n]) {
				return true, nil
			}
		}
	}
	return false, nil
}

// OutTensor is one tensor of an extracted LoRA, encoded.
type OutTensor struct {
	// Name is the kohya tensor name.
	Name string
	// Type and Shape describe Data.
	Type  formats.DType
	Shape []int64
	// Data holds the encoded values.
	Data []byte
}

// Shapes returns the shapes of the layer's lora_up and lora_down tensors
// at rank r: [rows, r] and [r, in] for a linear layer, [rows, r, 1, 1] and
// [r, in, kh, kw] for a convolution (the down factor is the kernel).
func (l *ExtractLayer) Shapes(r int) (up, down []int64) {
	up = []int64{l.Rows, int64(r)}
	if l.Conv() {
		up = append(up, 1, 1)
	}
	return up, append([]int64{int64(r)}, l.Inner...)
}

// Tensors encodes a decomposition of the layer as kohya writes it:
// <module>.lora_up.weight, <module>.lora_down.weight and <module>.alpha,
// alpha equal to the rank so that the scale is 1. t is F32, F16 or BF16.
// A decomposition of rank 0 gives no tensors.
func (l *ExtractLayer) Tensors(d *Decomposition, t formats.DType) ([]OutTensor, error) {
	if d.Rank == 0 {
		return nil, nil
	}
	if t != formats.F32 && t != formats.F16 && t != formats.BF16 {
		return nil, fmt.Errorf("lora: extracted factors are f32, f16 or bf16, not %s", t)
	}
	if int64(len(d.Up)) != l.Rows*int64(d.Rank) || int64(len(d.Down)) != int64(d.Rank)*l.Cols() {
		return nil, fmt.Errorf("lora: %s: decomposition does not fit the layer", l.Module)
	}
	upv, downv, err := l.fitFactors(d, t)
	if err != nil {
		return nil, err
	}
	up, down := l.Shapes(d.Rank)
	return []OutTensor{
		{Name: l.Module + ".lora_up.weight", Type: t, Shape: up, Data: encodeFloats(t, upv)},
		{Name: l.Module + ".lora_down.weight", Type: t, Shape: down, Data: encodeFloats(t, downv)},
		{Name: l.Module + ".alpha", Type: t, Shape: []int64{}, Data: encodeFloats(t, []float32{float32(d.Rank)})},
	}, nil
}

// fitFactors returns the factors to encode in t: d's own (up = U·Σ, down
// = Vᵀ, kohya's split) when every value fits t's range; otherwise Σ split
// evenly (up = U·√Σ, down = √Σ·Vᵀ, the same product), which brings the
// largest value down to about √σ₁. A layer whose factors overflow t even
// then is refused: written, its Inf values would make every output of
// the layer Inf while the report said the difference was kept.
func (l *ExtractLayer) fitFactors(d *Decomposition, t formats.DType) (up, down []float32, err error) {
	limit := math.MaxFloat32
	switch t {
	case formats.F16:
		limit = 65504 // beyond it values round to Inf
	case formats.BF16:
		limit = 0x1.fep127 // bf16's largest finite value
	}
	if fits(d.Up, limit) && fits(d.Down, limit) {
		return d.Up, d.Down, nil
	}
	r, cols := d.Rank, int(l.Cols())
	up, down = make([]float32, len(d.Up)), make([]float32, len(d.Down))
	for c := 0; c < r; c++ {
		root := math.Sqrt(d.Sigma[c])
		for i := c; i < len(up); i += r {
			if root > 0 {
				up[i] = float32(float64(d.Up[i]) / root)
			}
		}
		for j := 0; j < cols; j++ {
			down[c*cols+j] = float32(float64(d.Down[c*cols+j]) * root)
		}
	}
	if !fits(up, limit) || !fits(down, limit) {
		return nil, nil, fmt.Errorf("lora: %s: the factors exceed %s's range (±%g) even with the singular values split evenly between lora_up and lora_down (the largest is %.4g): extract to a wider type", l.Module, t, limit, d.Sigma[0])
	}
	return up, down, nil
}

// fits reports whether every value of v is finite and within ±limit.
func fits(v []float32, limit float64) bool {
	for _, x := range v {
		if !(math.Abs(float64(x)) <= limit) { // NaN fails too
			return false
		}
	}
	return true
}

func encodeFloats(t formats.DType, v []float32) []byte {
	switch t {
	case formats.F16:
		b := make([]byte, 2*len(v))
		quant.F32ToF16Row(b, v)
		return b
	case formats.BF16:
		b := make([]byte, 2*len(v))
		quant.F32ToBF16Row(b, v)
		return b
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
