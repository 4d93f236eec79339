package quantize

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// run quantizes with opts, writing with ro, and fails the test on error.
func run(t *testing.T, opts Options, ro pipeline.Options) *planned {
	t.Helper()
	res, err := quantizeRun(context.Background(), &opts, ro, false)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// maxRelError bounds ‖a−b‖/‖a‖ per output type for the tiny model's
// Gaussian-like weights (measured about 0.07 for q4_K, 0.045 for q5_0,
// 0.005 for q8_0; the bounds leave room without hiding a broken codec,
// whose error is near 1).
var maxRelError = map[string]float64{"q4_K": 0.1, "q5_0": 0.06, "q8_0": 0.01, "q6_K": 0.03, "q5_K": 0.05, "q4_1": 0.1}

// TestQuantizeTinyQ4KM quantizes the tiny SD1 model to Q4_K_M and checks
// the GGUF (metadata, full dims, types) and, with Diff, that every tensor
// dequantizes close to the source and unquantized tensors are unchanged.
func TestQuantizeTinyQ4KM(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny-q4_k_m.gguf")
	res := run(t, Options{Input: tinyPath, Output: out, Type: "Q4_K_M"}, pipeline.Options{Threads: 2})
	g := mustOpen(t, out)
	meta := g.Metadata()
	for k, v := range map[string]any{"general.architecture": "sd1", "general.file_type": uint32(15), "general.quantization_version": uint32(2)} {
		if kv, ok := meta.Get(k); !ok || kv.Value != v {
			t.Errorf("%s = %v, want %v", k, kv.Value, v)
		}
	}
	if meta[0].Key != "general.architecture" {
		t.Errorf("first key %q", meta[0].Key)
	}
	// CLIP's I64 position_ids is left out, as sd-cli's convert leaves it
	// (TestQuantizeLeavesOutPositionIDs); formats/gguf's tests hold the
	// leading dims of one that position_ids [1, 77] used to show here.
	for _, ts := range g.Tensors() {
		if strings.HasSuffix(ts.Name, "position_ids") {
			t.Errorf("%s %v is in the GGUF", ts.Name, ts.Shape)
		}
	}
	if ts := find(t, g, "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc2.weight"); ts.Type != formats.Q4_K {
		t.Errorf("fc2 is %s, want q4_K", ts.Type)
	}
	if len(g.Tensors()) != len(res.rows()) {
		t.Errorf("%d tensors written, %d planned", len(g.Tensors()), len(res.rows()))
	}
	src := mustOpen(t, tinyPath)
	d, err := inspect.Diff(src, g, inspect.DiffOptions{ChunkElements: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Missing, []string{"cond_stage_model.transformer.text_model.embeddings.position_ids"}) || len(d.Extra)+len(d.Skipped) > 0 || d.Totals.ShapeChanges > 0 {
		t.Fatalf("names or shapes differ: missing %v (want position_ids alone) extra %v skipped %v", d.Missing, d.Extra, d.Skipped)
	}
	quantized := 0
	for _, td := range d.Tensors {
		if td.TypeB == "f16" || td.TypeB == "i64" {
			if !td.Identical {
				t.Errorf("%s: %s tensor changed", td.Name, td.TypeB)
			}
			continue
		}
		quantized++
		bound, ok := maxRelError[td.TypeB]
		if !ok {
			t.Errorf("%s: unexpected type %s", td.Name, td.TypeB)
			continue
		}
		if td.RelError == nil || *td.RelError > bound || *td.Cosine < 0.99 {
			t.Errorf("%s (%s): relative error %v, cosine %v (bound %v)", td.Name, td.TypeB, *td.RelError, *td.Cosine, bound)
		}
	}
	if quantized < 100 {
		t.Errorf("only %d quantized tensors", quantized)
	}
}

// TestQuantizeDeterministic checks that the bytes do not depend on the
// thread count or the memory budget.
func TestQuantizeDeterministic(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	run(t, Options{Input: tinyPath, Output: a, Type: "Q4_K_M"}, pipeline.Options{Threads: 1})
	run(t, Options{Input: tinyPath, Output: b, Type: "Q4_K_M"}, pipeline.Options{Threads: 3, MaxMemory: 256 << 10})
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("output differs between 1 thread and 3 threads with a small budget")
	}
}

// TestQuantizeConvrot writes int8_convrot safetensors and checks the exact
// tensor names, dtypes, shapes and comfy_quant JSON of a rotated and a
// plain-fallback module, that comfyquant.Detect reads them back, and that the
// streamed bytes equal convrot's whole-tensor Plan.Encode.
func TestQuantizeConvrot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny-int8.safetensors")
	var logs bytes.Buffer
	res := run(t, Options{Input: tinyPath, Output: out, Type: "int8_convrot", GroupSize: 64, Log: logTo(&logs)}, pipeline.Options{})
	g := mustOpen(t, out)
	const (
		// input_blocks.2, not 1: the first and last blocks stay float
		// (the family table's ModuleKeep).
		rot   = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.ff.net.2"   // in = 128
		plain = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn1.to_q" // in = 32
	)
	for _, c := range []struct {
		mod, json string
		shape     []int64
	}{
		{rot, `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 64}`, []int64{32, 128}},
		{plain, `{"format": "int8_tensorwise"}`, []int64{32, 32}},
	} {
		w, s, mk := find(t, g, c.mod+".weight"), find(t, g, c.mod+".weight_scale"), find(t, g, c.mod+".comfy_quant")
		if w.Type != formats.I8 || !slices.Equal(w.Shape, c.shape) {
			t.Errorf("%s.weight: %s %v", c.mod, w.Type, w.Shape)
		}
		if s.Type != formats.F32 || !slices.Equal(s.Shape, []int64{c.shape[0], 1}) {
			t.Errorf("%s.weight_scale: %s %v", c.mod, s.Type, s.Shape)
		}
		raw, err := formats.ReadTensor(g, &mk)
		if err != nil {
			t.Fatal(err)
		}
		if mk.Type != formats.U8 || string(raw) != c.json {
			t.Errorf("%s.comfy_quant: %s %q, want U8 %q", c.mod, mk.Type, raw, c.json)
		}
	}
	if !strings.Contains(logs.String(), "plain int8") || !strings.Contains(rowOf(t, res, plain+".weight").Reason, "not divisible by 64") {
		t.Error("the plain int8 fallback is not reported")
	}
	if _, ok := formats.Find(g, "model.diffusion_model.input_blocks.0.0.weight.comfy_quant"); ok {
		t.Error("a conv kernel became a module")
	}
	mods, err := comfyquant.Detect(g)
	if err != nil {
		t.Fatal(err)
	}
	// The UNet's linear layers only: the tiny CLIP's 12 linear layers and
	// its two embedding tables stay float, and so do the 22 linear layers
	// of the first and last blocks (the family table's ModuleKeep).
	if len(mods) != 182-22 {
		t.Errorf("Detect found %d modules, want %d", len(mods), 182-22)
	}
	// Oracle: the whole-tensor encoder gives the same bytes.
	src := mustOpen(t, tinyPath)
	st := find(t, src, rot+".weight")
	p, err := convrot.NewLayer(formats.Tensor{Name: st.Name, Type: formats.F32, Shape: st.Shape}, convrot.Options{Type: convrot.Int8Convrot, GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := formats.ReadTensor(src, &st)
	f := make([]float32, st.Elements())
	for i := range f {
		f[i] = f16(raw[2*i:])
	}
	wantW, wantS, err := p.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	gw, gs := find(t, g, rot+".weight"), find(t, g, rot+".weight_scale")
	gotW, _ := formats.ReadTensor(g, &gw)
	gotS, _ := formats.ReadTensor(g, &gs)
	if !bytes.Equal(gotW, wantW) || !bytes.Equal(gotS, wantS) {
		t.Error("streamed int8_convrot bytes differ from convrot.Layer.Encode")
	}
	// Requantizing the ComfyUI file to GGUF decodes the modules exactly.
	back := filepath.Join(t.TempDir(), "back.gguf")
	run(t, Options{Input: out, Output: back, Type: "F16"}, pipeline.Options{})
	d, err := inspect.Diff(src, mustOpen(t, back), inspect.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// GGUF leaves out the integer position_ids buffer, nothing else.
	if !slices.Equal(d.Missing, []string{"cond_stage_model.transformer.text_model.embeddings.position_ids"}) || len(d.Extra) > 0 || *d.Totals.RelError > 0.01 {
		t.Errorf("int8_convrot -> f16: missing %v extra %v, error %v", d.Missing, d.Extra, *d.Totals.RelError)
	}
}

func f16(b []byte) float32 {
	h := uint16(b[0]) | uint16(b[1])<<8
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 31
	man := uint32(h) & 1023
	switch {
	case exp == 0:
		v := float32(man) / 1024 / 16384
		if sign != 0 {
			return -v
		}
		return v
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// TestQuantizeFP8 checks the FP8 layout: a 0-d F32 scale of amax/448.
func TestQuantizeFP8(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny-fp8.safetensors")
	run(t, Options{Input: tinyPath, Output: out, Type: "fp8_e4m3"}, pipeline.Options{})
	g := mustOpen(t, out)
	const mod = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.ff.net.2"
	w, s := find(t, g, mod+".weight"), find(t, g, mod+".weight_scale")
	if w.Type != formats.F8_E4M3 || len(s.Shape) != 0 || s.Type != formats.F32 {
		t.Errorf("fp8 module: weight %s, scale %s %v", w.Type, s.Type, s.Shape)
	}
	src := mustOpen(t, tinyPath)
	st := find(t, src, mod+".weight")
	raw, _ := formats.ReadTensor(src, &st)
	var amax float32
	for i := 0; i < len(raw); i += 2 {
		amax = max(amax, float32(math.Abs(float64(f16(raw[i:])))))
	}
	sb, _ := formats.ReadTensor(g, &s)
	if got := math.Float32frombits(uint32(sb[0]) | uint32(sb[1])<<8 | uint32(sb[2])<<16 | uint32(sb[3])<<24); got != amax/448 {
		t.Errorf("scale %v, want amax/448 = %v", got, amax/448)
	}
}

// TestQuantizeRefusals checks requantization, an existing output and the
// output-is-input case; none leaves a partial file.
func TestQuantizeRefusals(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q.gguf")
	run(t, Options{Input: tinyPath, Output: q, Type: "Q4_K_M"}, pipeline.Options{})
	again := filepath.Join(dir, "again.gguf")
	if _, err := quantizeRun(context.Background(), &Options{Input: q, Output: again, Type: "Q8_0"}, pipeline.Options{}, false); !errors.Is(err, ErrRequantize) || !strings.Contains(err.Error(), "pass AllowRequantize") {
		t.Errorf("requantize without the flag: %v", err)
	}
	var logs bytes.Buffer
	res := run(t, Options{Input: q, Output: again, Type: "Q4_K_M", AllowRequantize: true, Log: logTo(&logs)}, pipeline.Options{})
	if !strings.Contains(logs.String(), "requantizing") {
		t.Error("requantizing gave no warning")
	}
	// Tensors already of their target type are copied, so Q4_K_M of Q4_K_M is the same data.
	if r := rowOf(t, res, "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc2.weight"); !strings.Contains(r.Reason, "copied") {
		t.Errorf("q4_K -> q4_K not copied: %s", r.Reason)
	}
	d, err := inspect.Diff(mustOpen(t, q), mustOpen(t, again), inspect.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.HasDifferences() {
		t.Errorf("requantizing Q4_K_M to Q4_K_M changed %d tensors", d.Totals.Compared-d.Totals.Identical)
	}
	// A GGUF input's keys are kept, the recomputed ones replaced.
	meta := filepath.Join(dir, "meta.gguf")
	run(t, Options{Input: again, Output: meta, Type: "Q8_0", AllowRequantize: true, Metadata: []string{"general.name=tiny"}}, pipeline.Options{})
	mm := mustOpen(t, meta).Metadata()
	seen := map[string]int{}
	for _, kv := range mm {
		seen[kv.Key]++
	}
	if kv, _ := mm.Get("general.file_type"); kv.Value != uint32(7) || seen["general.architecture"] != 1 || seen["general.name"] != 1 {
		t.Errorf("requantized metadata: file_type %v, keys %v", kv.Value, seen)
	}
	if _, err := quantizeRun(context.Background(), &Options{Input: tinyPath, Output: q, Type: "Q8_0"}, pipeline.Options{}, false); !errors.Is(err, pipeline.ErrExists) {
		t.Errorf("existing output: %v", err)
	}
	run(t, Options{Input: tinyPath, Output: q, Type: "Q8_0"}, pipeline.Options{Force: true})
	if _, err := quantizeRun(context.Background(), &Options{Input: q, Output: q, Type: "Q8_0", AllowRequantize: true}, pipeline.Options{Force: true}, false); !errors.Is(err, pipeline.ErrOutputIsInput) {
		t.Errorf("output = input: %v", err)
	}
	if _, err := quantizeRun(context.Background(), &Options{Input: tinyPath, Output: filepath.Join(dir, "x.safetensors"), Type: "Q8_0"}, pipeline.Options{}, false); err == nil || !strings.Contains(err.Error(), ".gguf") {
		t.Errorf("wrong extension: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), pipeline.PartialSuffix) {
			t.Errorf("partial file %s left behind", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.safetensors")); err == nil {
		t.Error("refused output was created")
	}
}

// imatrixFiles writes the same importance statistics as a legacy .dat
// and a GGUF imatrix: sums of 4·v with 4 calls, so both give the means v
// exactly.
func imatrixFiles(t *testing.T, dir string, names []string) (dat, gg string, means map[string][]float32) {
	t.Helper()
	means = map[string][]float32{}
	mx := &imatrix.Matrix{Datasets: []string{"calib.txt"}, ChunkCount: 4}
	for k, name := range names {
		sum := make([]float32, 256)
		mean := make([]float32, 256)
		for i := range sum {
			// Strongly uneven importance, so the weighted search moves.
			mean[i] = float32((i*7+k*13)%17+1) * float32(1+i%5*i%5)
			sum[i] = 4 * mean[i]
		}
		means[name] = mean
		mx.Entries = append(mx.Entries, &imatrix.Entry{Name: name, Sum2: sum, Counts: []float32{4}, NCall: 4})
	}
	mx.Entries = append(mx.Entries, &imatrix.Entry{Name: "not.in.the.model.weight", Sum2: make([]float32, 8), Counts: []float32{4}, NCall: 4})
	dat, gg = filepath.Join(dir, "imatrix.dat"), filepath.Join(dir, "imatrix.gguf")
	var b bytes.Buffer
	if err := imatrix.WriteDat(&b, mx); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dat, b.Bytes(), 0o644)
	b.Reset()
	if _, err := imatrix.WriteGGUF(&b, mx); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(gg, b.Bytes(), 0o644)
	return dat, gg, means
}

var fc2 = []string{
	"cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc2.weight",
	"cond_stage_model.transformer.text_model.encoder.layers.1.mlp.fc2.weight",
}

// TestQuantizeImatrix checks that both imatrix formats give the same
// bytes, that they change the q4_K tensors against the unweighted path,
// the quantize.imatrix.* keys, and the missing/unused entry reports.
func TestQuantizeImatrix(t *testing.T) {
	dir := t.TempDir()
	dat, gg, _ := imatrixFiles(t, dir, fc2)
	plainOut, datOut, ggOut := filepath.Join(dir, "plain.gguf"), filepath.Join(dir, "dat.gguf"), filepath.Join(dir, "gguf.gguf")
	run(t, Options{Input: tinyPath, Output: plainOut, Type: "Q4_K_M"}, pipeline.Options{})
	res := run(t, Options{Input: tinyPath, Output: datOut, Type: "Q4_K_M", Imatrix: []string{dat}}, pipeline.Options{})
	run(t, Options{Input: tinyPath, Output: ggOut, Type: "Q4_K_M", Imatrix: []string{gg}}, pipeline.Options{})
	p, d, g := mustOpen(t, plainOut), mustOpen(t, datOut), mustOpen(t, ggOut)
	for _, name := range fc2 {
		pt, dt, gt := find(t, p, name), find(t, d, name), find(t, g, name)
		pb, _ := formats.ReadTensor(p, &pt)
		db, _ := formats.ReadTensor(d, &dt)
		gb, _ := formats.ReadTensor(g, &gt)
		if bytes.Equal(pb, db) {
			t.Errorf("%s: the imatrix did not change the q4_K bytes", name)
		}
		if !bytes.Equal(db, gb) {
			t.Errorf("%s: .dat and GGUF imatrix with the same means give different bytes", name)
		}
		if !rowOf(t, res, name).Imatrix {
			t.Errorf("%s: not marked as using the imatrix", name)
		}
	}
	meta := d.Metadata()
	for k, v := range map[string]any{"quantize.imatrix.file": dat, "quantize.imatrix.dataset": "calib.txt",
		"quantize.imatrix.entries_count": int32(3), "quantize.imatrix.chunks_count": int32(4)} {
		if kv, ok := meta.Get(k); !ok || kv.Value != v {
			t.Errorf("%s = %v (%T), want %v", k, kv.Value, kv.Value, v)
		}
	}
	if !slices.Equal(res.ImatrixUnused, []string{"not.in.the.model.weight"}) {
		t.Errorf("unused entries %v", res.ImatrixUnused)
	}
	if len(res.ImatrixMissing) == 0 || slices.Contains(res.ImatrixMissing, fc2[0]) {
		t.Errorf("missing entries %d (first %v)", len(res.ImatrixMissing), res.ImatrixMissing)
	}
	// Two files: call-count-weighted average. The same file twice is the same means.
	twice := filepath.Join(dir, "twice.gguf")
	run(t, Options{Input: tinyPath, Output: twice, Type: "Q4_K_M", Imatrix: []string{dat, gg}}, pipeline.Options{})
	tw := mustOpen(t, twice)
	tt, dt := find(t, tw, fc2[0]), find(t, d, fc2[0])
	tb, _ := formats.ReadTensor(tw, &tt)
	db, _ := formats.ReadTensor(d, &dt)
	if !bytes.Equal(tb, db) {
		t.Error("the same statistics given twice changed the weighted average")
	}
}

// TestImportanceErrors checks length, finiteness and combination errors.
func TestImportanceErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, e *imatrix.Entry) string {
		var b bytes.Buffer
		if _, err := imatrix.WriteGGUF(&b, &imatrix.Matrix{Entries: []*imatrix.Entry{e}}); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, b.Bytes(), 0o644)
		return p
	}
	short := write("short.gguf", &imatrix.Entry{Name: fc2[0], Sum2: make([]float32, 100), Counts: []float32{1}})
	_, err := quantizeRun(context.Background(), &Options{Input: tinyPath, Output: filepath.Join(dir, "o.gguf"), Type: "Q4_K_M", Imatrix: []string{short}}, pipeline.Options{}, true)
	if err == nil || !strings.Contains(err.Error(), "has 100 values") || !strings.Contains(err.Error(), fc2[0]) {
		t.Errorf("short vector: %v", err)
	}
	nan := write("nan.gguf", &imatrix.Entry{Name: fc2[0], Sum2: append(make([]float32, 255), float32(math.NaN())), Counts: []float32{1}})
	if _, err := LoadImportance([]string{nan}); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("NaN value: %v", err)
	}
	if _, err := LoadImportance([]string{short, write("long.gguf", &imatrix.Entry{Name: fc2[0], Sum2: make([]float32, 256), Counts: []float32{1}})}); err == nil {
		t.Error("entries of different lengths were combined")
	}
	// Weighted average: means 1 (1 call) and 4 (3 calls) combine to 13/4.
	a := write("a.gguf", &imatrix.Entry{Name: "w", Sum2: []float32{1}, Counts: []float32{1}})
	b := write("b.gguf", &imatrix.Entry{Name: "w", Sum2: []float32{12}, Counts: []float32{3}})
	imp, err := LoadImportance([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := imp.Vector("w", 1); err != nil || !ok || v[0] != 13.0/4 {
		t.Errorf("combined mean %v %v %v, want 3.25", v, ok, err)
	}
}

// TestReshapeConvRoundTrip quantizes the tiny SD1 model with
// --reshape-conv (conv kernels stored as rows of 256 with
// comfy.gguf.orig_shape), checks it with Diff (which honours orig_shape),
// then requantizes that file without the flag: the kernels get their torch
// shapes back and need no orig_shape.
func TestReshapeConvRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rs := filepath.Join(dir, "rs.gguf")
	var logs bytes.Buffer
	res := run(t, Options{Input: tinyPath, Output: rs, Type: "Q4_K_M", ReshapeConv: true, Log: logTo(&logs)}, pipeline.Options{})
	if !strings.Contains(logs.String(), "cannot load") {
		t.Error("no warning that sd.cpp cannot load --reshape-conv output")
	}
	n := res.Report.reshaped
	if n == 0 {
		t.Fatal("nothing reshaped")
	}
	g := mustOpen(t, rs)
	var conv string
	for _, row := range res.rows() {
		if row.Reshaped && len(row.SourceShape) == 4 {
			conv = row.Name
			break
		}
	}
	if ts := find(t, g, conv); len(ts.Shape) != 2 || ts.Shape[1] != 256 {
		t.Errorf("%s stored as %v", conv, ts.Shape)
	}
	if _, ok := g.Metadata().Get(gguf.OrigShapePrefix + conv); !ok {
		t.Errorf("no orig_shape for %s", conv)
	}
	d, err := inspect.Diff(mustOpen(t, tinyPath), g, inspect.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Totals.ShapeChanges != 0 || len(d.Skipped) != 0 || *d.Totals.RelError > 0.05 {
		t.Errorf("reshaped file: %d shape changes, %d skipped, error %v", d.Totals.ShapeChanges, len(d.Skipped), *d.Totals.RelError)
	}
	back := filepath.Join(dir, "back.gguf")
	br := run(t, Options{Input: rs, Output: back, Type: "Q8_0", AllowRequantize: true, Targets: []string{"sdcpp"}, Strict: true}, pipeline.Options{})
	if br.Report.reshaped != 0 {
		t.Errorf("%d tensors still reshaped", br.Report.reshaped)
	}
	bg := mustOpen(t, back)
	if ts := find(t, bg, conv); len(ts.Shape) != 4 {
		t.Errorf("%s back as %v, want its 4-D torch shape", conv, ts.Shape)
	}
	for _, kv := range bg.Metadata() {
		if strings.HasPrefix(kv.Key, gguf.OrigShapePrefix) {
			t.Errorf("stale %s", kv.Key)
		}
	}
}

// TestQuantizeInterrupted checks that a cancelled run leaves no output and
// no partial file.
func TestQuantizeInterrupted(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := quantizeRun(ctx, &Options{Input: tinyPath, Output: out, Type: "Q4_K_M"}, pipeline.Options{}, false); !errors.Is(err, pipeline.ErrInterrupted) {
		t.Errorf("cancelled run: %v", err)
	}
	for _, p := range []string{out, out + pipeline.PartialSuffix} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists", p)
		}
	}
}

// TestImatrixConvertedNames checks the fallback through sd.cpp's name
// conversion: an SDXL-style tensor finds the entry stored under the name
// sd.cpp converts it to.
func TestImatrixConvertedNames(t *testing.T) {
	dir := t.TempDir()
	const stored = "conditioner.embedders.0.transformer.text_model.encoder.layers.0.mlp.fc2.weight"
	const converted = "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc2.weight"
	_, gg, _ := imatrixFiles(t, dir, []string{converted})
	m := &memModel{path: "x.safetensors", tensors: []formats.Tensor{{Name: stored, Type: formats.F16, Shape: []int64{64, 256}, Size: 64 * 256 * 2, File: "x.safetensors"}}}
	r := plan(t, m, Options{Type: "Q4_K_M", Imatrix: []string{gg}})
	if row := rowOf(t, r, stored); !row.Imatrix {
		t.Errorf("%s did not use the entry %s", stored, converted)
	}
	if slices.Contains(r.ImatrixUnused, converted) || len(r.ImatrixMissing) != 0 {
		t.Errorf("unused %v, missing %v", r.ImatrixUnused, r.ImatrixMissing)
	}
}

// TestQuantizeConvrotRules: user rules choose per tensor among the ComfyUI
// types, keep and float types, and refuse module types for non-linear tensors.
func TestQuantizeConvrotRules(t *testing.T) {
	const (
		fc2  = "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc2"
		toQ  = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q"
		toK  = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_k"
		conv = "model.diffusion_model.input_blocks.0.0.weight"
	)
	for _, flags := range []Options{
		{TensorTypeRules: `mlp\.fc2=fp8_e4m3,attn1\.to_q=keep,attn1\.to_k=bf16`},
		{TensorTypes: []string{`mlp\.fc2=int8`, `mlp\.fc2=fp8_e4m3`, `attn1\.to_q=keep`, `attn1\.to_k=bf16`}},
	} {
		out := filepath.Join(t.TempDir(), "r.safetensors")
		opts := flags
		opts.Input, opts.Output, opts.Type, opts.GroupSize = tinyPath, out, "int8_convrot", 16
		run(t, opts, pipeline.Options{})
		g := mustOpen(t, out)
		src := mustOpen(t, tinyPath)
		if w := find(t, g, fc2+".weight"); w.Type != formats.F8_E4M3 {
			t.Errorf("%v: fc2 weight %s, want f8_e4m3", flags, w.Type)
		}
		if w, s := find(t, g, toQ+".weight"), find(t, src, toQ+".weight"); w.Type != s.Type {
			t.Errorf("%v: kept to_q is %s, source %s", flags, w.Type, s.Type)
		}
		if _, ok := formats.Find(g, toQ+".comfy_quant"); ok {
			t.Errorf("%v: kept to_q has a comfy_quant marker", flags)
		}
		if w := find(t, g, toK+".weight"); w.Type != formats.BF16 {
			t.Errorf("%v: to_k %s, want bf16", flags, w.Type)
		}
	}
	// A module type on a convolution or a lookup table is an error naming the tensor.
	for _, c := range []struct{ rule, tensor string }{
		{`input_blocks\.0\.0\.weight=int8`, conv},
		{`token_embedding=int8_convrot`, "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight"},
	} {
		_, err := quantizeRun(context.Background(), &Options{Input: tinyPath, Output: filepath.Join(t.TempDir(), "x.safetensors"), Type: "int8", TensorTypeRules: c.rule}, pipeline.Options{}, true)
		if err == nil || !strings.Contains(err.Error(), c.tensor) || !strings.Contains(err.Error(), "linear layers only") {
			t.Errorf("rule %s: error %v, want one naming %s", c.rule, err, c.tensor)
		}
	}
}

// TestConvrotKeepsEmbeddingsFloat reads the SD 1.5 int8_convrot plan:
// CLIP's token and position embeddings (lookup tables) and every text
// encoder and VAE tensor stay float, the UNet's linear layers are modules,
// its convolutions, time embedding and the linear layers of its first and
// last blocks (the family table's ModuleKeep, a measured choice) are not.
func TestConvrotKeepsEmbeddingsFloat(t *testing.T) {
	res, err := quantizeRun(context.Background(), &Options{Input: tinyPath, Output: filepath.Join(t.TempDir(), "x.safetensors"), Type: "int8_convrot", GroupSize: 16}, pipeline.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	modules, edge := 0, 0
	for _, r := range res.rows() {
		isModule := r.To == formats.I8
		if isModule {
			modules++
		}
		switch {
		case strings.Contains(r.Name, "token_embedding"), strings.Contains(r.Name, "position_embedding"):
			if isModule || !r.To.Info().Float {
				t.Errorf("%s: %s (%s), want a float type", r.Name, r.To, r.Reason)
			}
		case strings.HasPrefix(r.Name, "cond_stage_model."), strings.HasPrefix(r.Name, "first_stage_model."):
			if isModule {
				t.Errorf("%s: a module outside the diffusion model (%s)", r.Name, r.Reason)
			}
		case strings.Contains(r.Name, "time_embed."), strings.HasSuffix(r.Name, "input_blocks.0.0.weight"):
			if isModule {
				t.Errorf("%s: kept tensor became a module", r.Name)
			}
		case strings.Contains(r.Name, "input_blocks.1."), strings.Contains(r.Name, "output_blocks.11."):
			if strings.HasSuffix(r.Name, "to_q.weight") || strings.HasSuffix(r.Name, "ff.net.2.weight") {
				edge++
				if isModule || !r.To.Info().Float || !strings.Contains(r.Reason, "_blocks.1") {
					t.Errorf("%s: %s (%s), want float, kept by the table's module keep list", r.Name, r.To, r.Reason)
				}
			}
		case strings.HasSuffix(r.Name, "attn1.to_q.weight"), strings.HasSuffix(r.Name, "attn2.to_k.weight"), strings.HasSuffix(r.Name, "ff.net.2.weight"):
			if !isModule {
				t.Errorf("%s: %s (%s), want an int8 module", r.Name, r.To, r.Reason)
			}
		}
	}
	if modules == 0 || edge == 0 {
		t.Errorf("%d modules, %d linear weights of the first and last blocks", modules, edge)
	}
}
