package quantize

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// budgetModel is a small F32 model with real values: weights whose rows
// 256 divides (so the k-quants are candidates), of different sizes and
// scales, a 320-wide one (32-element types only) and a norm.
func budgetModel() *memModel {
	m := &memModel{path: "budget.safetensors", data: map[string][]byte{}}
	r := rand.New(rand.NewPCG(3, 4))
	add := func(name string, scale float64, shape ...int64) {
		n, _ := formats.Elements(shape)
		b := make([]byte, 4*n)
		for i := range n {
			v := r.NormFloat64() * scale
			if i%97 == 0 {
				v *= 6 // outliers, so the types differ in how they cope
			}
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
		m.tensors = append(m.tensors, formats.Tensor{Name: name, Type: formats.F32, Shape: shape, File: m.path, Size: 4 * n})
		m.data[name] = b
	}
	add("blk.0.attn_q.weight", 0.05, 64, 256)
	add("blk.0.ffn_up.weight", 0.02, 128, 512)
	add("blk.0.norm.weight", 1, 256)
	add("blk.1.attn_q.weight", 0.1, 96, 256)
	add("blk.1.proj.weight", 0.03, 40, 320)
	add("blk.1.ffn_down.weight", 0.01, 256, 256)
	return m
}

// readFloats decodes a whole tensor of m to float32.
func readFloats(t *testing.T, m formats.Model, name string) []float32 {
	t.Helper()
	for _, tt := range m.Tensors() {
		if tt.Name != name {
			continue
		}
		raw, err := formats.ReadTensor(m, &tt)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, tt.Elements())
		if err := quant.DequantizeRows(tt.Type, out, raw, 1); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatalf("no tensor %q", name)
	return nil
}

// planBudgetModel plans m with a budget and returns the plan and report.
func planBudgetModel(t *testing.T, m formats.Model, opts Options) *planned {
	t.Helper()
	if opts.Output == "" {
		opts.Output = filepath.Join(t.TempDir(), "out.gguf")
	}
	p, r, err := PlanModel(&opts, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &planned{p, r}
}

// TestBudgetPredictsWrittenFile writes budgeted files at several budgets,
// with and without an imatrix, and checks against the files themselves:
// each fits its budget and has exactly the predicted size, and every
// allocated tensor's squared error (column-weighted by the imatrix)
// against the source, computed here from the decoded output, is the one
// predicted.
func TestBudgetPredictsWrittenFile(t *testing.T) {
	dir := t.TempDir()
	m := budgetModel()
	dat, _, means := imatrixFiles(t, dir, []string{"blk.0.attn_q.weight", "blk.1.ffn_down.weight"})
	// The smallest and largest files the candidates allow, from two plans.
	small := planBudgetModel(t, m, Options{Budget: &Budget{Bytes: 1 << 40, Candidates: []formats.DType{formats.Q2_K, formats.Q4_0}}})
	big := planBudgetModel(t, m, Options{Budget: &Budget{Bytes: 1 << 40}})
	minSize, maxSize := small.Budget.FileBytes, big.Budget.FileBytes
	if minSize >= maxSize {
		t.Fatalf("sizes %d..%d", minSize, maxSize)
	}
	prevErr := math.Inf(1)
	for k, frac := range []float64{0.05, 0.3, 0.6, 1} {
		budget := minSize + int64(frac*float64(maxSize-minSize))
		for _, imat := range [][]string{nil, {dat}} {
			out := filepath.Join(dir, "b.gguf")
			os.Remove(out)
			p := planBudgetModel(t, m, Options{Budget: &Budget{Bytes: budget, Threads: 2}, Imatrix: imat, Output: out})
			if err := pipeline.Run(context.Background(), p.Plan, pipeline.Options{Threads: 2}); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(out)
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() > budget || st.Size() != p.Budget.FileBytes {
				t.Errorf("budget %d: file of %d bytes, predicted %d", budget, st.Size(), p.Budget.FileBytes)
			}
			g := mustOpen(t, out)
			for _, bt := range p.Budget.Tensors {
				src, got := readFloats(t, m, bt.Name), readFloats(t, g, bt.Name)
				var w []float32
				if imat != nil {
					w = means[bt.Name]
				}
				sse := sqErr(src, got, w, int(lastDim(m, bt.Name)))
				var want float64
				for _, c := range bt.Candidates {
					if c.Type == bt.Type {
						want = c.SSE
					}
				}
				if math.Abs(sse-want) > 1e-9*math.Max(want, 1e-30) {
					t.Errorf("budget %d imatrix %v: %s as %s: squared error %.12g in the file, predicted %.12g", budget, imat != nil, bt.Name, bt.Type, sse, want)
				}
				if g.Tensors()[indexOf(g, bt.Name)].Type != bt.Type {
					t.Errorf("%s: written as %s, chosen %s", bt.Name, g.Tensors()[indexOf(g, bt.Name)].Type, bt.Type)
				}
			}
			g.Close()
			if imat == nil {
				if p.Budget.Error > prevErr+1e-12 {
					t.Errorf("budget %d: error %g above the smaller budget's %g", budget, p.Budget.Error, prevErr)
				}
				prevErr = p.Budget.Error
			}
		}
		if k == 3 && prevErr > 1e-6 {
			t.Errorf("the largest budget leaves error %g (f16 of f32 values should be near 0)", prevErr)
		}
	}
}

func lastDim(m formats.Model, name string) int64 {
	for _, t := range m.Tensors() {
		if t.Name == name {
			return t.Shape[len(t.Shape)-1]
		}
	}
	return 0
}

func indexOf(m formats.Model, name string) int {
	for i, t := range m.Tensors() {
		if t.Name == name {
			return i
		}
	}
	return -1
}

// TestBudgetDeterministic plans the same budget with 1, 2 and 3 measuring
// threads: the same types and bit-identical errors.
func TestBudgetDeterministic(t *testing.T) {
	m := budgetModel()
	var ref *BudgetReport
	for _, threads := range []int{1, 2, 3} {
		p := planBudgetModel(t, m, Options{Budget: &Budget{BPW: 4.6, Threads: threads}})
		if ref == nil {
			ref = p.Budget
			continue
		}
		for i, bt := range p.Budget.Tensors {
			r := ref.Tensors[i]
			if bt.Type != r.Type || len(bt.Candidates) != len(r.Candidates) {
				t.Fatalf("threads %d: %s is %s, with one thread %s", threads, bt.Name, bt.Type, r.Type)
			}
			for k, c := range bt.Candidates {
				if math.Float64bits(c.SSE) != math.Float64bits(r.Candidates[k].SSE) {
					t.Errorf("threads %d: %s %s: error %v, with one thread %v", threads, bt.Name, c.Type, c.SSE, r.Candidates[k].SSE)
				}
			}
		}
	}
}

// TestBudgetBPW checks that --bpw caps the summary's bits per weight and
// that a budget below the cheapest candidates is refused clearly.
func TestBudgetBPW(t *testing.T) {
	m := budgetModel()
	for _, bpw := range []float64{3.5, 4.8, 6} {
		p := planBudgetModel(t, m, Options{Budget: &Budget{BPW: bpw}})
		s, _ := p.Summary()
		if _, _, _, got := s.Totals(); got > bpw {
			t.Errorf("--bpw %g: plan has %.4f bits per weight", bpw, got)
		}
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Budget: &Budget{BPW: 1}}, "below the smallest"},
		{Options{Budget: &Budget{Bytes: 1000}}, "below the smallest file"},
		{Options{Budget: &Budget{Bytes: 1 << 20}, Type: "Q4_K_M"}, "leave out Type"},
		{Options{Budget: &Budget{Bytes: 1 << 20, BPW: 4}}, "use one"},
		{Options{Budget: &Budget{Bytes: 1 << 20, Metric: "psnr"}}, "Budget.Metric"},
		{Options{Budget: &Budget{Bytes: 1 << 20}, TypesFrom: "x.gguf"}, "does not combine"},
	} {
		c.opts.Output = "out.gguf"
		if _, _, err := PlanModel(&c.opts, m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.opts.Budget, err, c.want)
		}
	}
}

// typesOf maps each output tensor to its type.
func typesOf(p *planned) map[string]formats.DType {
	out := map[string]formats.DType{}
	for _, o := range p.Outputs {
		out[o.Name] = o.Type
	}
	return out
}

func sameTypes(t *testing.T, what string, got, want map[string]formats.DType) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	n := 0
	for name, w := range want {
		if got[name] != w {
			if n++; n <= 3 {
				t.Errorf("%s: %s is %s, the budget chose %s", what, name, got[name], w)
			}
		}
	}
}

// TestRecipeRoundTrip writes a budget's choice for the tiny SD1 model as
// --tensor-type-rules text and as a --tensor-type-file, and writes the
// budgeted file; planning with the rules, with the type file, or with
// --types-from that file must give every tensor the same type. A file of
// other tensors is refused by name.
func TestRecipeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "budget.gguf")
	res := run(t, Options{Input: tinyPath, Output: out, Budget: &Budget{Bytes: 3_000_000}}, pipeline.Options{Threads: 2})
	want := typesOf(res)
	// The fixed mixes priced beside the choice have the sizes their plans have.
	for _, mp := range res.Budget.Mixes {
		o := Options{Input: tinyPath, Output: filepath.Join(dir, "mix.gguf"), Type: mp.Name}
		p, err := quantizeRun(context.Background(), &o, pipeline.Options{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if size, err := planFileSize(p.Plan); err != nil || size != mp.FileBytes {
			t.Errorf("%s: plan writes %d bytes (%v), priced at %d", mp.Name, size, err, mp.FileBytes)
		}
	}
	if len(res.Budget.Mixes) < 4 {
		t.Errorf("only %d mixes priced", len(res.Budget.Mixes))
	}
	rc := res.Recipe()
	if len(rc) == 0 {
		t.Fatal("empty recipe")
	}
	kinds := map[formats.DType]bool{}
	for _, e := range rc {
		kinds[e.Type] = true
	}
	if len(kinds) < 2 {
		t.Errorf("the budget chose one type only (%v): the round trip checks little", kinds)
	}
	var tf bytes.Buffer
	if err := rc.WriteTypeFile(&tf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(tf.String(), "\n"); n != len(rc) {
		t.Errorf("type file has %d lines for %d tensors", n, len(rc))
	}
	typeFile := filepath.Join(dir, "types.txt")
	os.WriteFile(typeFile, tf.Bytes(), 0o644)
	for _, c := range []struct {
		what string
		opts Options
	}{
		{"--tensor-type-rules", Options{Type: "q8_0", TensorTypeRules: rc.Rules()}},
		{"--tensor-type-file", Options{Type: "q8_0", TensorTypeFile: typeFile}},
		{"--types-from", Options{Type: "q8_0", TypesFrom: out}},
	} {
		c.opts.Input, c.opts.Output = tinyPath, filepath.Join(dir, "again.gguf")
		p, err := quantizeRun(context.Background(), &c.opts, pipeline.Options{}, true)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		sameTypes(t, c.what, typesOf(p), want)
	}
	opts := Options{Input: tinyPath, Output: filepath.Join(dir, "x.gguf"), Type: "q8_0", TypesFrom: "../testdata/tiny-sdxl.gguf"}
	if _, err := quantizeRun(context.Background(), &opts, pipeline.Options{}, true); err == nil || !strings.Contains(err.Error(), "tensor names differ") {
		t.Errorf("--types-from a file of other tensors: %v", err)
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("a.weight=q4_K # comment\n"), 0o644)
	opts = Options{Input: tinyPath, Output: filepath.Join(dir, "x.gguf"), Type: "q8_0", TensorTypeFile: bad}
	if _, err := quantizeRun(context.Background(), &opts, pipeline.Options{}, true); err == nil || !strings.Contains(err.Error(), `item 2 "#"`) {
		t.Errorf("type file with a comment: %v", err)
	}
}

// TestTypeFileAnchorsSubstrings checks that a name found inside a later
// name is written anchored, so llama-quantize's first-match search does
// not give the later tensor its type.
func TestTypeFileAnchorsSubstrings(t *testing.T) {
	rc := Recipe{{"a.weight", formats.Q4_K}, {"xa.weight", formats.Q8_0}, {"b.weight", formats.F16}}
	var b bytes.Buffer
	if err := rc.WriteTypeFile(&b); err != nil {
		t.Fatal(err)
	}
	if want := "^a\\.weight$=q4_K\nxa.weight=q8_0\nb.weight=f16\n"; b.String() != want {
		t.Errorf("type file\n%s\nwant\n%s", b.String(), want)
	}
}

// FuzzTypeFile feeds arbitrary text to the --tensor-type-file parser: an
// error or entries with writable types, and a recipe written out parses
// back to the same names' types.
func FuzzTypeFile(f *testing.F) {
	for _, s := range []string{"a.weight=q4_K\nb.weight=f16\n", "^a\\.weight$=q8_0", "x=", "=q4_K", "a=b=q6_K", "(?=x)=q8_0", "# c\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Every item compiles a pattern twice (parse, then the round
		// trip), and writing is quadratic in the items: inputs the fuzzer
		// grew to many kilobytes kept it near 12k executions a minute.
		// The item and size limits have their own tests.
		if len(s) > 1024 {
			return
		}
		entries, err := parseTypeFile("fuzz.txt", []byte(s))
		if err != nil {
			return
		}
		var rc Recipe
		for _, e := range entries {
			if !e.typ.IsGGML() || !e.typ.InLinkedGGML() {
				t.Fatalf("%q gave type %v", s, e.typ)
			}
			rc = append(rc, RecipeEntry{Name: e.name, Type: e.typ})
		}
		var b bytes.Buffer
		if err := rc.WriteTypeFile(&b); err != nil {
			return
		}
		back, err := parseTypeFile("back.txt", b.Bytes())
		if err != nil || len(back) != len(rc) {
			t.Fatalf("written %q does not parse back: %v", b.String(), err)
		}
		for i := range back {
			if back[i].typ != rc[i].Type {
				t.Fatalf("entry %d: %v back as %v", i, rc[i].Type, back[i].typ)
			}
		}
	})
}

// TestTypeFileBinary checks that a binary file given as a type file is
// named as such and its bytes are not quoted into the error.
func TestTypeFileBinary(t *testing.T) {
	bin := append([]byte("a.weight=q4_K\n\x1b[2J"), make([]byte, 4096)...)
	_, err := parseTypeFile("model.gguf", bin)
	if err == nil || !strings.Contains(err.Error(), "model.gguf: not a text file") || len(err.Error()) > 100 {
		t.Fatalf("binary type file: %v", err)
	}
	long := strings.Repeat("x", 500) + "=nosuchtype"
	_, err = parseTypeFile("t.txt", []byte(long))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("long item: error of %d bytes: %v", len(err.Error()), err)
	}
}

// The budget's relative error, its per-tensor notes and the errors of the
// mixes it prices are ‖a−b‖/‖a‖ as sdtool diff measures the written
// files, over the allocated tensors: one definition under one name (issue
// 34, item 4; the mixes were priced as a sum of squares).
func TestBudgetRelativeErrorIsDiffs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "budget.gguf")
	res := run(t, Options{Input: tinyPath, Output: out, Budget: &Budget{Bytes: 3_000_000}}, pipeline.Options{Threads: 2})
	allocated := map[string]bool{}
	for _, bt := range res.Budget.Tensors {
		allocated[bt.Name] = !bt.Pinned
	}
	// relErrors diffs the file at path against the input: per tensor and
	// over the allocated ones as one vector.
	relErrors := func(path string) (map[string]float64, float64) {
		src, got := mustOpen(t, tinyPath), mustOpen(t, path)
		defer src.Close()
		defer got.Close()
		d, err := inspect.Diff(src, got, inspect.DiffOptions{})
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]float64{}
		var sse, energy float64
		for _, td := range d.Tensors {
			if !allocated[td.Name] || td.RelError == nil {
				continue
			}
			per[td.Name] = *td.RelError
			sse += (*td.RelError * td.NormA) * (*td.RelError * td.NormA)
			energy += td.NormA * td.NormA
		}
		return per, math.Sqrt(sse / energy)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-4*b }
	per, total := relErrors(out)
	if !near(res.Budget.RelError, total) {
		t.Errorf("budget: relative error %.6f, diff of the file %.6f", res.Budget.RelError, total)
	}
	notes := 0
	for _, o := range res.Plan.Outputs {
		var note float64
		if _, err := fmt.Sscanf(o.Note, "budget (predicted relative error %g)", &note); err != nil {
			continue
		}
		notes++
		if math.Abs(note-per[o.Name]) > 5e-3*per[o.Name] { // the note has 3 digits
			t.Errorf("%s: note says %g, diff %g", o.Name, note, per[o.Name])
		}
	}
	if notes == 0 {
		t.Error("no tensor notes its predicted error")
	}
	for _, mp := range res.Budget.Mixes {
		if mp.Name != "Q4_K_M" && mp.Name != "Q8_0" {
			continue
		}
		path := filepath.Join(dir, mp.Name+".gguf")
		run(t, Options{Input: tinyPath, Output: path, Type: mp.Name}, pipeline.Options{Threads: 2})
		if _, got := relErrors(path); !near(mp.RelError, got) {
			t.Errorf("%s priced at relative error %.6f, diff of the file %.6f", mp.Name, mp.RelError, got)
		}
	}
}

// The measurement reports its progress up to the whole input, and a
// cancelled context (Ctrl-C) stops it with an error that says so and how
// far it got, before anything is written (issue 34, item 3).
func TestBudgetProgressAndInterrupt(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var last, total int64
	var started int
	b := &Budget{Bytes: 3_000_000, Threads: 2,
		Start: func(n int, bytes int64) { started, total = n, bytes },
		Progress: func(done, all int64) {
			mu.Lock()
			defer mu.Unlock()
			if all != total || done > all {
				t.Errorf("progress %d of %d, announced %d", done, all, total)
			}
			last = max(last, done)
		}}
	run(t, Options{Input: tinyPath, Output: filepath.Join(dir, "a.gguf"), Budget: b}, pipeline.Options{Threads: 2})
	if started == 0 || total == 0 || last != total {
		t.Errorf("measured %d tensors, progress reached %d of %d bytes", started, last, total)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(dir, "b.gguf")
	o := Options{Input: tinyPath, Output: out, Budget: &Budget{Bytes: 3_000_000, Context: ctx}}
	_, err := quantizeRun(context.Background(), &o, pipeline.Options{}, false)
	if !errors.Is(err, pipeline.ErrInterrupted) || !strings.Contains(err.Error(), "while measuring the budget, after 0 of") {
		t.Errorf("cancelled measurement: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an interrupted budget wrote the output")
	}
}

// A budget below the smallest file the candidates allow is refused from
// the sizes alone, before the measurement reads the input (it took minutes
// to learn that a budget was too small).
func TestBudgetTooSmallBeforeMeasuring(t *testing.T) {
	for _, b := range []*Budget{{Bytes: 1000}, {BPW: 0.5}} {
		measured := false
		b.Start = func(int, int64) { measured = true }
		o := Options{Input: tinyPath, Output: filepath.Join(t.TempDir(), "a.gguf"), Budget: b}
		_, err := quantizeRun(context.Background(), &o, pipeline.Options{}, true)
		if err == nil || !strings.Contains(err.Error(), "is below the smallest") || measured {
			t.Errorf("%+v: measured %v, error %v", *b, measured, err)
		}
	}
}
