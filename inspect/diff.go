package inspect

import (
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/bytedance/sonic"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/workpool"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// DiffOptions tunes Diff.
type DiffOptions struct {
	// Filters keeps only tensors whose name matches one of them (none: all).
	Filters []*regexp.Regexp
	// Threads compares that many tensors at once (0: all cores).
	Threads int
	// ChunkElements bounds the elements decoded at once per tensor and
	// side (0: 1 Mi), which bounds memory whatever the model size.
	ChunkElements int64
	// Context stops the comparison when cancelled (nil: never); Diff then
	// returns an error wrapping pipeline.ErrInterrupted and the cause.
	Context context.Context
	// Progress, when set, is called from the workers with the stored bytes
	// of A and B read so far and the total (it must be safe for concurrent use).
	Progress func(done, total int64)
}

// TensorDiff compares one tensor present in both models. Error measures
// are nil where they are undefined: RelError when A is all zeros and B is
// not, Cosine when either side is all zeros, SNRdB when the two are equal.
type TensorDiff struct {
	// Name is the tensor name.
	Name string `json:"name"`
	// TypeA and TypeB name the stored types (tensor.Source.TypeName).
	TypeA string `json:"type_a"`
	TypeB string `json:"type_b"`
	// ShapeA and ShapeB are the logical shapes (orig_shape when recorded).
	ShapeA []int64 `json:"shape_a"`
	ShapeB []int64 `json:"shape_b"`
	// Elements is the element count.
	Elements int64 `json:"elements"`
	// ShapeChanged and TypeChanged flag differences of the stored forms
	// (B's comfy.gguf.orig_shape counts as its shape).
	ShapeChanged bool `json:"shape_changed"`
	TypeChanged  bool `json:"type_changed"`
	// RelError is ‖a−b‖/‖a‖.
	RelError *float64 `json:"rel_error"`
	// Cosine is a·b/(‖a‖‖b‖).
	Cosine *float64 `json:"cosine"`
	// SNRdB is 10·log10(‖a‖²/‖a−b‖²).
	SNRdB *float64 `json:"snr_db"`
	// MaxAbsDiff is the largest |a−b|.
	MaxAbsDiff float64 `json:"max_abs_diff"`
	// NormA and NormB are the L2 norms.
	NormA float64 `json:"norm_a"`
	NormB float64 `json:"norm_b"`
	// NonFinite counts positions where a or b is NaN or infinite (left out of the measures).
	NonFinite int64 `json:"non_finite"`
	// NonFiniteDiffs counts the positions where a or b is NaN or infinite
	// and the two differ; any makes the measures undefined and the tensor
	// rank as the worst.
	NonFiniteDiffs int64 `json:"non_finite_diffs"`
	// Identical reports that every value is equal.
	Identical bool `json:"identical"`
}

// DiffSkip is a tensor in both models that could not be compared.
type DiffSkip struct {
	// Name is the tensor name.
	Name string `json:"name"`
	// Reason says why it was not compared.
	Reason string `json:"reason"`
}

// DiffTotals sums the compared tensors: the error over all elements as one vector.
type DiffTotals struct {
	// Compared and Identical count the compared tensors and the identical ones.
	Compared  int `json:"compared"`
	Identical int `json:"identical"`
	// Elements counts the compared elements.
	Elements int64 `json:"elements"`
	// ShapeChanges and TypeChanges count compared tensors whose shape or type differ.
	ShapeChanges int `json:"shape_changes"`
	TypeChanges  int `json:"type_changes"`
	// RelError, Cosine and SNRdB are the measures over all compared elements.
	RelError *float64 `json:"rel_error"`
	Cosine   *float64 `json:"cosine"`
	SNRdB    *float64 `json:"snr_db"`
	// NonFiniteDiffs counts positions, over all tensors, where a non-finite
	// value differs.
	NonFiniteDiffs int64 `json:"non_finite_diffs"`
	// Worst names the tensor with the largest relative error ("" when none).
	Worst string `json:"worst"`
}

// DiffReport is the comparison of two models, as `sdtool diff` prints it.
type DiffReport struct {
	// A and B are the paths of the models compared.
	A string `json:"a"`
	B string `json:"b"`
	// Filter holds the --filter regexps.
	Filter []string `json:"filter"`
	// Missing are tensors of A absent from B; Extra tensors of B absent from A.
	Missing []string `json:"missing"`
	Extra   []string `json:"extra"`
	// Tensors are the compared tensors, worst (largest relative error) first.
	Tensors []TensorDiff `json:"tensors"`
	// Skipped are tensors in both that could not be compared.
	Skipped []DiffSkip `json:"skipped"`
	// Totals sums the comparison.
	Totals DiffTotals `json:"totals"`
}

// sums accumulates the statistics of one tensor (or all), in float64.
type sums struct {
	aa, bb, ab, dd, maxAbs              float64
	nonFinite, nonFiniteDiff, diffCount int64
}

func (s *sums) add(o sums) {
	s.aa += o.aa
	s.bb += o.bb
	s.ab += o.ab
	s.dd += o.dd
	s.maxAbs = max(s.maxAbs, o.maxAbs)
	s.nonFinite += o.nonFinite
	s.nonFiniteDiff += o.nonFiniteDiff
	s.diffCount += o.diffCount
}

func (s *sums) accumulate(a, b []float32) {
	for i, x := range a {
		y := b[i]
		fx, fy := float64(x), float64(y)
		if math.IsNaN(fx) || math.IsInf(fx, 0) || math.IsNaN(fy) || math.IsInf(fy, 0) {
			if !(math.IsNaN(fx) && math.IsNaN(fy)) && x != y {
				s.diffCount++
				s.nonFiniteDiff++
			}
			s.nonFinite++
			continue
		}
		d := fx - fy
		if d != 0 {
			s.diffCount++
		}
		s.aa += fx * fx
		s.bb += fy * fy
		s.ab += fx * fy
		s.dd += d * d
		s.maxAbs = max(s.maxAbs, math.Abs(d))
	}
}

func ptr(v float64) *float64 { return &v }

// measures returns relative error, cosine and SNR, nil where undefined:
// all three when a non-finite value differs, since the error is unbounded.
func (s *sums) measures() (rel, cos, snr *float64) {
	if s.nonFiniteDiff > 0 {
		return nil, nil, nil
	}
	switch {
	case s.aa > 0:
		rel = ptr(math.Sqrt(s.dd / s.aa))
	case s.dd == 0:
		rel = ptr(0)
	}
	if s.aa > 0 && s.bb > 0 {
		cos = ptr(s.ab / math.Sqrt(s.aa*s.bb))
	}
	if s.dd > 0 {
		snr = ptr(10 * math.Log10(s.aa/s.dd))
		if math.IsInf(*snr, 0) {
			snr = nil
		}
	}
	return
}

// Diff compares models a and b tensor by tensor: names only in one of
// them, shape and type changes, and for every tensor in both the error of
// b against a, with both dequantized to float32 on the fly (any format
// and type, ComfyUI comfy_quant layers decoded through their scales) and
// streamed in chunks, so memory does not grow with the model.
func Diff(a, b formats.Model, opts DiffOptions) (*DiffReport, error) {
	// Indexes, not Views: each pair's Sources are built when it is
	// compared, so a header of many tensors costs no Source per tensor.
	da, err := tensor.NewIndex(a)
	if err != nil {
		return nil, err
	}
	db, err := tensor.NewIndex(b)
	if err != nil {
		return nil, err
	}
	r := &DiffReport{A: a.Path(), B: b.Path(), Missing: []string{}, Extra: []string{}, Tensors: []TensorDiff{}, Skipped: []DiffSkip{}, Filter: []string{}}
	for _, f := range opts.Filters {
		r.Filter = append(r.Filter, f.String())
	}
	c := &comparison{da: da, db: db, chunk: opts.ChunkElements, progress: opts.Progress, errs: map[int]string{}}
	c.pairs = matchNames(r, da, db, opts.Filters)
	if c.chunk <= 0 {
		c.chunk = 1 << 20
	}
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	c.compareAll(ctx, opts.Threads)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%v) after %s of %s", pipeline.ErrInterrupted, context.Cause(ctx), pipeline.HumanBytes(c.done.Load()), pipeline.HumanBytes(c.total))
	}
	c.reportTo(r)
	return r, nil
}

// pair is a tensor of both models: its Source numbers in the two indexes.
type pair struct{ a, b int32 }

// matchNames pairs the tensors of A and B that the filters keep by name,
// and lists in r the names only one side has.
func matchNames(r *DiffReport, da, db *tensor.Index, filters []*regexp.Regexp) []pair {
	keep := func(name string) bool {
		if len(filters) == 0 {
			return true
		}
		for _, f := range filters {
			if f.MatchString(name) {
				return true
			}
		}
		return false
	}
	var pairs []pair
	// One index of B's names, and a mark on each B tensor that A has, in
	// place of a map of each side's names. Added last first, so that a
	// repeated name finds its last tensor.
	inB := formats.NewNameIndex(db.Len(), db.Name)
	for j := db.Len() - 1; j >= 0; j-- {
		inB.Add(j)
	}
	matched := make([]bool, db.Len())
	for i := range da.Len() {
		name := da.Name(i)
		if !keep(name) {
			continue
		}
		if j := inB.Lookup(name); j >= 0 {
			pairs = append(pairs, pair{int32(i), int32(j)})
			matched[j] = true
		} else {
			r.Missing = append(r.Missing, name)
		}
	}
	for j := range db.Len() {
		if name := db.Name(j); !matched[inB.Lookup(name)] && keep(name) {
			r.Extra = append(r.Extra, name)
		}
	}
	return pairs
}

// comparison is one Diff's comparing of its pairs, shared by the workers.
type comparison struct {
	da, db   *tensor.Index
	pairs    []pair
	chunk    int64
	progress func(done, total int64)
	total    int64
	done     atomic.Int64
	results  []TensorDiff
	// sumsOf holds the products a tensor's measures and the totals need;
	// the rest of its sums go straight into its result (a full sums a
	// tensor would add a third to the table on headers of many tensors).
	sumsOf []products
	// errs says why tensors could not be compared, by pair: rare, so a map.
	errsMu sync.Mutex
	errs   map[int]string
}

// products are the sums of one tensor that its measures and the totals need.
type products struct{ aa, bb, ab, dd float64 }

// diffWorker is one worker's state: scratch and one Source a side,
// refilled for each pair (the results keep only their shapes, which are
// the models').
type diffWorker struct {
	sa, sb     tensor.Scratch
	srcA, srcB tensor.Source
}

// compareAll compares every pair on threads workers (0: all cores); it
// stops early when ctx is done.
func (c *comparison) compareAll(ctx context.Context, threads int) {
	for _, p := range c.pairs {
		c.total += c.da.Tensor(int(p.a)).Size + c.db.Tensor(int(p.b)).Size
	}
	c.results = make([]TensorDiff, len(c.pairs))
	c.sumsOf = make([]products, len(c.pairs))
	workers := make([]diffWorker, workpool.Size(threads, len(c.pairs)))
	workpool.Each(ctx, len(c.pairs), threads, func(w, i int) error {
		c.compare(ctx, i, &workers[w])
		return nil
	})
}

// fail records why pair i could not be compared.
func (c *comparison) fail(i int, msg string) {
	c.errsMu.Lock()
	c.errs[i] = msg
	c.errsMu.Unlock()
}

// progressed adds n bytes read to the progress.
func (c *comparison) progressed(n int64) {
	if c.progress != nil {
		c.progress(c.done.Add(n), c.total)
	}
}

// compare reads pair i chunk by chunk on both sides and sums the
// differences into its result.
func (c *comparison) compare(ctx context.Context, i int, w *diffWorker) {
	c.da.Fill(int(c.pairs[i].a), &w.srcA)
	c.db.Fill(int(c.pairs[i].b), &w.srcB)
	pa, pb := &w.srcA, &w.srcB
	d := TensorDiff{
		Name: pa.Name, TypeA: pa.TypeName(), TypeB: pb.TypeName(),
		ShapeA: pa.Shape(), ShapeB: pb.Shape(),
	}
	d.ShapeChanged = !slices.Equal(d.ShapeA, d.ShapeB)
	d.TypeChanged = d.TypeA != d.TypeB
	c.results[i] = d
	n := pa.Elements()
	if n != pb.Elements() {
		c.fail(i, fmt.Sprintf("element counts differ: %s has %d, %s has %d", formats.FormatShape(d.ShapeA), n, formats.FormatShape(d.ShapeB), pb.Elements()))
		return
	}
	var s sums
	size := pa.Tensor.Size + pb.Tensor.Size
	reported := int64(0)
	for first := int64(0); first < n; first += c.chunk {
		if ctx.Err() != nil {
			break
		}
		k := min(c.chunk, n-first)
		fa, fb := w.sa.Float32s(0, int(k)), w.sb.Float32s(0, int(k))
		if err := pa.Read(fa, first, &w.sa); err != nil {
			c.fail(i, err.Error())
			break
		}
		if err := pb.Read(fb, first, &w.sb); err != nil {
			c.fail(i, err.Error())
			break
		}
		s.accumulate(fa, fb)
		if part := size * (first + k) / n; part > reported {
			c.progressed(part - reported)
			reported = part
		}
	}
	res := &c.results[i]
	res.Elements = n
	res.MaxAbsDiff, res.NonFinite, res.NonFiniteDiffs, res.Identical = s.maxAbs, s.nonFinite, s.nonFiniteDiff, s.diffCount == 0
	c.sumsOf[i] = products{s.aa, s.bb, s.ab, s.dd}
}

// reportTo moves the compared tensors into r, worst first, with their
// measures and the totals; the others go to r.Skipped.
func (c *comparison) reportTo(r *DiffReport) {
	var all sums
	// The compared tensors are compacted into results itself: a second
	// table of 200-byte entries would double diff's memory on header-heavy
	// models.
	r.Tensors = c.results[:0]
	for i, d := range c.results {
		if msg, ok := c.errs[i]; ok {
			r.Skipped = append(r.Skipped, DiffSkip{Name: d.Name, Reason: msg})
			continue
		}
		p := c.sumsOf[i]
		s := sums{aa: p.aa, bb: p.bb, ab: p.ab, dd: p.dd, maxAbs: d.MaxAbsDiff, nonFinite: d.NonFinite, nonFiniteDiff: d.NonFiniteDiffs}
		d.RelError, d.Cosine, d.SNRdB = s.measures()
		d.NormA, d.NormB = math.Sqrt(s.aa), math.Sqrt(s.bb)
		r.Tensors = append(r.Tensors, d)
		all.add(s)
		r.Totals.Elements += d.Elements
		if d.Identical {
			r.Totals.Identical++
		}
		if d.ShapeChanged {
			r.Totals.ShapeChanges++
		}
		if d.TypeChanged {
			r.Totals.TypeChanges++
		}
	}
	sort.SliceStable(r.Tensors, func(i, j int) bool {
		ti, tj := r.Tensors[i], r.Tensors[j]
		if ti.NonFiniteDiffs != tj.NonFiniteDiffs {
			return ti.NonFiniteDiffs > tj.NonFiniteDiffs // non-finite damage first, most first
		}
		ri, rj := relKey(ti), relKey(tj)
		if ri != rj {
			return ri > rj
		}
		return r.Tensors[i].Name < r.Tensors[j].Name
	})
	r.Totals.Compared = len(r.Tensors)
	r.Totals.RelError, r.Totals.Cosine, r.Totals.SNRdB = all.measures()
	r.Totals.NonFiniteDiffs = all.nonFiniteDiff
	if len(r.Tensors) > 0 && !r.Tensors[0].Identical {
		r.Totals.Worst = r.Tensors[0].Name
	}
}

// relKey orders tensors worst first: an undefined relative error (A zero,
// B not) is the worst, then non-finite mismatches rank by the error itself.
func relKey(d TensorDiff) float64 {
	if d.RelError == nil {
		return math.Inf(1)
	}
	return *d.RelError
}

// WriteDiffJSON writes the report as the JSON documented in docs/diff-json.md.
func WriteDiffJSON(w io.Writer, r *DiffReport) error {
	b, err := sonic.ConfigStd.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func fmtMeasure(v *float64, format, undefined string) string {
	if v == nil {
		return undefined
	}
	return fmt.Sprintf(format, *v)
}

// WriteDiffText prints the report: missing and extra names, skipped
// tensors, a table of compared tensors worst first, and the totals.
func WriteDiffText(w io.Writer, r *DiffReport) error {
	w = cleanWriter{w}
	fmt.Fprintf(w, "A: %s\nB: %s\n", r.A, r.B)
	list := func(title string, names []string) {
		if len(names) == 0 {
			return
		}
		fmt.Fprintf(w, "%s (%d):\n", title, len(names))
		for _, n := range names {
			fmt.Fprintf(w, "  %s\n", Clean(n))
		}
	}
	list("only in A", r.Missing)
	list("only in B", r.Extra)
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "not compared (%d):\n", len(r.Skipped))
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "  %s: %s\n", Clean(s.Name), Clean(s.Reason))
		}
	}
	fmt.Fprintln(w)
	row := func(i int, cells []string) []string {
		if i < 0 {
			return append(cells, "TENSOR", "TYPE A", "TYPE B", "SHAPE", "REL ERROR", "COSINE", "SNR dB", "MAX |A-B|")
		}
		d := &r.Tensors[i]
		shape := formats.FormatShape(d.ShapeA)
		if d.ShapeChanged {
			shape = formats.FormatShape(d.ShapeA) + " -> " + formats.FormatShape(d.ShapeB)
		}
		types := d.TypeB
		if !d.TypeChanged {
			types = "="
		}
		snr := fmtMeasure(d.SNRdB, "%.2f", "inf")
		if d.Identical {
			snr = "identical"
		}
		rel := fmtMeasure(d.RelError, "%.6f", "undefined")
		if d.NonFiniteDiffs > 0 {
			rel, snr = fmt.Sprintf("non-finite (%d)", d.NonFiniteDiffs), "-"
		}
		return append(cells, Clean(d.Name), d.TypeA, types, shape, rel, fmtMeasure(d.Cosine, "%.6f", "-"), snr,
			strconv.FormatFloat(d.MaxAbsDiff, 'g', 4, 64))
	}
	if err := writeTable(w, len(r.Tensors), row); err != nil {
		return err
	}
	t := r.Totals
	fmt.Fprintf(w, "\n%s compared (%d identical, %d shape changes, %d type changes), %d elements; %d only in A, %d only in B, %d not compared\n",
		pipeline.Count(t.Compared, "tensor", "tensors"), t.Identical, t.ShapeChanges, t.TypeChanges, t.Elements, len(r.Missing), len(r.Extra), len(r.Skipped))
	overall := fmtMeasure(t.RelError, "%.6f", "undefined")
	if t.NonFiniteDiffs > 0 {
		overall = fmt.Sprintf("undefined (%d non-finite values differ)", t.NonFiniteDiffs)
	}
	fmt.Fprintf(w, "overall: relative error %s, cosine %s, SNR %s dB\n",
		overall, fmtMeasure(t.Cosine, "%.6f", "-"), fmtMeasure(t.SNRdB, "%.2f", "inf"))
	if t.Worst != "" {
		fmt.Fprintf(w, "worst: %s\n", Clean(t.Worst))
	}
	return nil
}

// HasDifferences reports whether the models differ in names or values.
func (r *DiffReport) HasDifferences() bool {
	return len(r.Missing) > 0 || len(r.Extra) > 0 || len(r.Skipped) > 0 || r.Totals.Identical != r.Totals.Compared
}
