package merge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
)

// Shapes of the arithmetic fixtures: a 2-D weight, a 1-D vector whose
// length no block divides, and an integer buffer.
var (
	shapeW = []int64{8, 64}
	shapeV = []int64{300}
)

// abc writes A, B and C (F32) with the same tensor names.
func abc(t *testing.T, dir string) (a, b, c string, vals [3]map[string][]float32) {
	pos := testTensor{"pos", formats.I64, []int64{3}, bytesOf(24, 9)}
	paths := make([]string, 3)
	for i, n := range []string{"a", "b", "c"} {
		vals[i] = map[string][]float32{"w": ramp(512, uint64(10+i)), "v": ramp(300, uint64(20+i))}
		paths[i] = write(t, filepath.Join(dir, n+".safetensors"), map[string]string{"from": n},
			tF32("w", shapeW, vals[i]["w"]), tF32("v", shapeV, vals[i]["v"]), pos)
	}
	return paths[0], paths[1], paths[2], vals
}

func ptr(v float64) *float64 { return &v }

// merged runs an arithmetic merge and returns the output tensors.
func merged(t *testing.T, a *Arithmetic, out string, threads int, chunk int64) map[string]testTensor {
	t.Helper()
	p, err := PlanArithmetic(a, out)
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, threads, chunk)
	got, _, _ := readAll(t, out)
	return got
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*max(1, math.Abs(want[i]))) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(got))
	}
}

// Direct computations of each method, in float64 from the definitions.

func oracleWeighted(a, b []float32, al float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = (1-al)*float64(a[i]) + al*float64(b[i])
	}
	return out
}

func oracleAddDiff(a, b, c []float32, al float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = float64(a[i]) + al*(float64(b[i])-float64(c[i]))
	}
	return out
}

func oracleSlerp(a, b []float32, t float64) []float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	cos := dot / math.Sqrt(na) / math.Sqrt(nb)
	if math.Abs(cos) > 0.9995 {
		return oracleWeighted(a, b, t)
	}
	om := math.Acos(cos)
	out := make([]float64, len(a))
	for i := range a {
		out[i] = (math.Sin((1-t)*om)*float64(a[i]) + math.Sin(t*om)*float64(b[i])) / math.Sin(om)
	}
	return out
}

// oracleTIES sorts each delta's magnitudes to find the threshold.
func oracleTIES(a []float32, fts [][]float32, density, al float64) []float64 {
	n := len(a)
	k := min(max(int(math.Ceil(density*float64(n))), 1), n)
	trimmed := make([][]float64, len(fts))
	for j, x := range fts {
		d := make([]float32, n)
		mags := make([]float64, n)
		for i := range a {
			d[i] = x[i] - a[i] // deltas are float32 values
			mags[i] = math.Abs(float64(d[i]))
		}
		slices.Sort(mags)
		slices.Reverse(mags)
		tau := mags[k-1]
		trimmed[j] = make([]float64, n)
		for i := range d {
			if d[i] != 0 && math.Abs(float64(d[i])) >= tau {
				trimmed[j][i] = float64(d[i])
			}
		}
	}
	out := make([]float64, n)
	for i := range a {
		var sum float64
		for j := range trimmed {
			sum += trimmed[j][i]
		}
		var agree float64
		cnt := 0
		for j := range trimmed {
			if v := trimmed[j][i]; v != 0 && (v > 0) == (sum > 0) {
				agree += v
				cnt++
			}
		}
		out[i] = float64(a[i])
		if sum != 0 && cnt > 0 {
			out[i] += al * agree / float64(cnt)
		}
	}
	return out
}

// splitMix64 is the sequential form of the generator, written out from its
// published definition: state += γ, then the mixing function.
type splitMix64 struct{ state uint64 }

func (g *splitMix64) next() uint64 {
	g.state += 0x9e3779b97f4a7c15
	z := g.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func oracleDARE(name string, a []float32, fts [][]float32, p, al float64, seed int64) []float64 {
	out := make([]float64, len(a))
	gens := make([]splitMix64, len(fts))
	for j := range fts {
		gens[j].state = Key(seed, name, j)
	}
	for i := range a {
		var sum float64
		for j, x := range fts {
			u := float64(gens[j].next()>>11) / (1 << 53)
			if u >= p {
				sum += float64(x[i]-a[i]) / (1 - p)
			}
		}
		out[i] = float64(a[i]) + al*sum/float64(len(fts))
	}
	return out
}

// Every method against its direct computation, on a 2-D and a 1-D tensor.
func TestMethodsAgainstDirectComputation(t *testing.T) {
	dir := t.TempDir()
	pa, pb, pc, v := abc(t, dir)
	cases := []struct {
		a      Arithmetic
		oracle func(name string) []float64
	}{
		{Arithmetic{Method: WeightedSum, Alpha: ptr(0.3)}, func(n string) []float64 { return oracleWeighted(v[0][n], v[1][n], 0.3) }},
		{Arithmetic{Method: WeightedSum}, func(n string) []float64 { return oracleWeighted(v[0][n], v[1][n], 0.5) }},
		{Arithmetic{Method: AddDifference, C: pc, Alpha: ptr(0.7)}, func(n string) []float64 { return oracleAddDiff(v[0][n], v[1][n], v[2][n], 0.7) }},
		{Arithmetic{Method: Slerp, Alpha: ptr(0.25)}, func(n string) []float64 { return oracleSlerp(v[0][n], v[1][n], 0.25) }},
		{Arithmetic{Method: TIES, Density: 0.3, Alpha: ptr(0.8)}, func(n string) []float64 {
			return oracleTIES(v[0][n], [][]float32{v[1][n]}, 0.3, 0.8)
		}},
		{Arithmetic{Method: TIES, C: pc, Density: 0.3}, func(n string) []float64 {
			return oracleTIES(v[0][n], [][]float32{v[1][n], v[2][n]}, 0.3, 1)
		}},
		{Arithmetic{Method: TIES, C: pc, Density: 1}, func(n string) []float64 {
			return oracleTIES(v[0][n], [][]float32{v[1][n], v[2][n]}, 1, 1)
		}},
		{Arithmetic{Method: DARE, DropP: ptr(0.7), Seed: 5, Alpha: ptr(0.9)}, func(n string) []float64 {
			return oracleDARE(n, v[0][n], [][]float32{v[1][n]}, 0.7, 0.9, 5)
		}},
		{Arithmetic{Method: DARE, C: pc, Seed: -3}, func(n string) []float64 {
			return oracleDARE(n, v[0][n], [][]float32{v[1][n], v[2][n]}, DefaultDropP, 1, -3)
		}},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d_%s", i, c.a.Method), func(t *testing.T) {
			c.a.A, c.a.B = pa, pb
			got := merged(t, &c.a, filepath.Join(dir, fmt.Sprintf("o%d.safetensors", i)), 2, 0)
			for _, n := range []string{"w", "v"} {
				if got[n].typ != formats.F32 {
					t.Errorf("%s: type %s, want A's f32", n, got[n].typ)
				}
				closeTo(t, n, floats(got[n].data), c.oracle(n), 2e-6)
			}
			if !bytes.Equal(got["pos"].data, bytesOf(24, 9)) || got["pos"].typ != formats.I64 {
				t.Error("the integer tensor is not A's copy")
			}
		})
	}
}

// TIES with density below 1 keeps only part of each delta; DARE drops about p.
func TestTIESAndDAREChangeWhatTheyShould(t *testing.T) {
	dir := t.TempDir()
	pa, pb, _, v := abc(t, dir)
	got := merged(t, &Arithmetic{Method: TIES, A: pa, B: pb, Density: 0.25}, filepath.Join(dir, "t.safetensors"), 1, 0)
	w := floats(got["w"].data)
	changed := 0
	for i := range w {
		if w[i] != v[0]["w"][i] {
			changed++
		}
	}
	if changed != 128 { // ceil(0.25*512), no ties in the random magnitudes
		t.Errorf("TIES density 0.25 changed %d of 512 elements, want 128", changed)
	}
	got = merged(t, &Arithmetic{Method: DARE, A: pa, B: pb, DropP: ptr(0.75), Seed: 1}, filepath.Join(dir, "d.safetensors"), 1, 0)
	w = floats(got["w"].data)
	kept := 0
	for i := range w {
		if w[i] != v[0]["w"][i] {
			kept++
		}
	}
	if kept < 90 || kept > 170 { // 128 expected
		t.Errorf("DARE p=0.75 kept %d of 512 deltas", kept)
	}
}

// DARE and TIES (and slerp) give the same bytes for a seed whatever the
// thread count, the pipeline's chunk size and the statistics pass's piece size.
func TestDeterministicAcrossThreadsAndChunks(t *testing.T) {
	dir := t.TempDir()
	names := []string{"a", "b", "c"}
	paths := make([]string, 3)
	for i, n := range names {
		paths[i] = write(t, filepath.Join(dir, n+".safetensors"), nil,
			tF32("big", []int64{256, 256}, ramp(256*256, uint64(40+i))),
			tF32("small", []int64{3, 100}, ramp(300, uint64(50+i))))
	}
	saved := statChunk
	defer func() { statChunk = saved }()
	for _, a := range []Arithmetic{
		{Method: DARE, C: paths[2], Seed: 42, DropP: ptr(0.6)},
		{Method: TIES, C: paths[2], Density: 0.1},
		{Method: Slerp, Alpha: ptr(0.4)},
	} {
		a.A, a.B = paths[0], paths[1]
		var ref []byte
		for _, run := range []struct {
			threads int
			chunk   int64
			stat    int64
		}{{1, 0, 1 << 18}, {3, 0, 1 << 18}, {1, 64 << 10, 1000}, {3, 64 << 10, 4096}} {
			statChunk = run.stat
			out := filepath.Join(dir, fmt.Sprintf("%s-%d-%d-%d.safetensors", a.Method, run.threads, run.chunk, run.stat))
			got := merged(t, &a, out, run.threads, run.chunk)
			b := append(append([]byte(nil), got["big"].data...), got["small"].data...)
			if ref == nil {
				ref = b
				if bytes.Equal(got["big"].data, f32(ramp(256*256, 40)...)) {
					t.Fatalf("%s changed nothing", a.Method)
				}
				continue
			}
			if !bytes.Equal(b, ref) {
				t.Errorf("%s: threads %d, chunk %d, stat piece %d: bytes differ from threads 1, default chunks", a.Method, run.threads, run.chunk, run.stat)
			}
		}
	}
	// Another seed drops other elements.
	a := Arithmetic{Method: DARE, A: paths[0], B: paths[1], Seed: 1}
	g1 := merged(t, &a, filepath.Join(dir, "s1.safetensors"), 1, 0)
	a.Seed = 2
	g2 := merged(t, &a, filepath.Join(dir, "s2.safetensors"), 1, 0)
	if bytes.Equal(g1["big"].data, g2["big"].data) {
		t.Error("DARE ignores the seed")
	}
}

func TestSlerpColinearFallsBackToLerp(t *testing.T) {
	dir := t.TempDir()
	va := ramp(256, 7)
	vb := make([]float32, len(va))
	for i := range va {
		vb[i] = 2 * va[i]
	}
	pa := write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{256}, va), tF32("z", []int64{4}, make([]float32, 4)))
	pb := write(t, filepath.Join(dir, "b.safetensors"), nil, tF32("w", []int64{256}, vb), tF32("z", []int64{4}, []float32{1, 2, 3, 4}))
	got := merged(t, &Arithmetic{Method: Slerp, A: pa, B: pb, Alpha: ptr(0.5)}, filepath.Join(dir, "o.safetensors"), 1, 0)
	closeTo(t, "colinear", floats(got["w"].data), oracleWeighted(va, vb, 0.5), 1e-6)
	// A zero tensor has no direction: lerp too.
	closeTo(t, "zero", floats(got["z"].data), []float64{0.5, 1, 1.5, 2}, 1e-6)
	if s0, s1, lerp := slerpCoefficients(0, 1, 1, 0.5); lerp || math.Abs(float64(s0)-math.Sqrt(0.5)) > 1e-6 || s0 != s1 {
		t.Errorf("orthogonal unit vectors: %v %v %v", s0, s1, lerp)
	}
}

func TestAlphaRules(t *testing.T) {
	rules, err := ParseAlphaRules(`input_blocks\.[0-9]{1,2}\.=0.3, out=0.7,,^x=-1`)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 3 || rules[0].Pattern != `input_blocks\.[0-9]{1,2}\.` || rules[1].Pattern != " out" || rules[2].Value != -1 {
		t.Fatalf("rules = %+v", rules)
	}
	if a := alphaFor(rules, "m.input_blocks.11.w", 0.5); a != 0.3 {
		t.Errorf("first rule: %v", a)
	}
	if a := alphaFor(rules, "x out", 0.5); a != 0.7 {
		t.Errorf("first match wins: %v", a)
	}
	if a := alphaFor(rules, "mid", 0.5); a != 0.5 {
		t.Errorf("default: %v", a)
	}
	for _, bad := range []string{"x", "=0.3", "a=b", "a=NaN", "(=1", "a=1,b"} {
		if _, err := ParseAlphaRules(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	dir := t.TempDir()
	pa, pb, _, v := abc(t, dir)
	got := merged(t, &Arithmetic{Method: WeightedSum, A: pa, B: pb, Alpha: ptr(0.1), AlphaRules: "^v$=0.9"}, filepath.Join(dir, "o.safetensors"), 1, 0)
	closeTo(t, "w", floats(got["w"].data), oracleWeighted(v[0]["w"], v[1]["w"], 0.1), 1e-6)
	closeTo(t, "v", floats(got["v"].data), oracleWeighted(v[0]["v"], v[1]["v"], 0.9), 1e-6)
}

func TestMissingAndShapeMismatch(t *testing.T) {
	dir := t.TempDir()
	va := ramp(64, 1)
	pa := write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{64}, va), tF32("only_a", []int64{2}, []float32{5, 6}), tF32("s", []int64{2, 2}, []float32{1, 2, 3, 4}))
	pb := write(t, filepath.Join(dir, "b.safetensors"), nil, tF32("w", []int64{64}, ramp(64, 2)), tF32("only_b", []int64{1}, []float32{1}), tF32("s", []int64{4}, []float32{1, 2, 3, 4}))
	out := filepath.Join(dir, "o.safetensors")
	_, err := PlanArithmetic(&Arithmetic{Method: WeightedSum, A: pa, B: pb}, out)
	// A's two and B's one are counted apart (they were summed as "3 tensors are missing").
	wantErr(t, err, "2 tensors of "+pa+" are missing from "+pb+" or have another shape there", `"only_a" (missing from `+pb, `"s" (shape [2 2] in `+pa+", [4] in "+pb,
		"1 tensor of "+pb+" is not in "+pa, `"only_b" (only in `+pb, "AllowMissing")
	noOutput(t, out)
	p, err := PlanArithmetic(&Arithmetic{Method: WeightedSum, A: pa, B: pb, AllowMissing: true}, out)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(p.Notes, "\n")
	p.Close()
	if !strings.Contains(notes, "merged: 1 tensor of 3 by weighted_sum") || !strings.Contains(notes, "warning: 2 tensors of "+pa+" copied unmerged") {
		t.Errorf("notes do not count the merged and the copied tensors: %q", notes)
	}
	got := merged(t, &Arithmetic{Method: WeightedSum, A: pa, B: pb, AllowMissing: true}, out, 1, 0)
	if !bytes.Equal(got["only_a"].data, f32(5, 6)) || !bytes.Equal(got["s"].data, f32(1, 2, 3, 4)) || len(got["s"].shape) != 2 {
		t.Error("--allow-missing does not copy A's tensor")
	}
	if _, ok := got["only_b"]; ok {
		t.Error("a tensor only B has reached the output")
	}
	closeTo(t, "w", floats(got["w"].data), oracleWeighted(va, ramp(64, 2), 0.5), 1e-6)
}

// A merge in which B shares no tensor with A would write A again: it is
// refused, --allow-missing or not (issue 34, item 5).
func TestNothingToMerge(t *testing.T) {
	dir := t.TempDir()
	pa := write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{4}, ramp(4, 1)))
	pb := write(t, filepath.Join(dir, "b.safetensors"), nil, tF32("x", []int64{4}, ramp(4, 2)))
	out := filepath.Join(dir, "o.safetensors")
	_, err := PlanArithmetic(&Arithmetic{Method: WeightedSum, A: pa, B: pb, AllowMissing: true}, out)
	wantErr(t, err, "no tensor of "+pa+" is in "+pb, "nothing to merge")
	noOutput(t, out)
}

// Output types follow A unless --type; block types apply where rows fit.
func TestOutputTypes(t *testing.T) {
	dir := t.TempDir()
	pa, pb, _, v := abc(t, dir)
	got := merged(t, &Arithmetic{Method: WeightedSum, A: pa, B: pb, Type: "f16"}, filepath.Join(dir, "o16.safetensors"), 1, 0)
	if got["w"].typ != formats.F16 || got["v"].typ != formats.F16 || got["pos"].typ != formats.I64 {
		t.Fatalf("types %s %s %s", got["w"].typ, got["v"].typ, got["pos"].typ)
	}
	want := oracleWeighted(v[0]["w"], v[1]["w"], 0.5)
	dec := make([]float32, 512)
	quant.F16ToF32Row(dec, got["w"].data)
	closeTo(t, "f16", dec, want, 1e-3)

	gq := merged(t, &Arithmetic{Method: WeightedSum, A: pa, B: pb, Type: "q8_0"}, filepath.Join(dir, "q.gguf"), 1, 0)
	if gq["w"].typ != formats.Q8_0 || gq["v"].typ != formats.F32 {
		t.Errorf("q8_0: w %s (want q8_0), v %s (want A's f32: 300 is no whole number of blocks)", gq["w"].typ, gq["v"].typ)
	}
	// The q8_0 bytes are the codec's encoding of the f32 merge.
	f := merged(t, &Arithmetic{Method: WeightedSum, A: pa, B: pb}, filepath.Join(dir, "f.safetensors"), 1, 0)
	wq := make([]byte, len(gq["w"].data))
	if err := quant.QuantizeRows(formats.Q8_0, wq, floats(f["w"].data), 64, nil, 1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wq, gq["w"].data) {
		t.Error("q8_0 output is not the encoding of the f32 merge")
	}

	_, err := PlanArithmetic(&Arithmetic{Method: WeightedSum, A: pa, B: pb, Type: "q8_0"}, filepath.Join(dir, "q.safetensors"))
	wantErr(t, err, "Type q8_0 cannot be stored in safetensors")
	_, err = PlanArithmetic(&Arithmetic{Method: WeightedSum, A: pa, B: pb, Type: "nope"}, filepath.Join(dir, "x.gguf"))
	wantErr(t, err, `Type: unknown type "nope"`)

	// A quantized A cannot go into safetensors as it is.
	qa := filepath.Join(dir, "qa.gguf")
	write(t, qa, nil, testTensor{"w", formats.Q8_0, shapeW, gq["w"].data})
	qb := write(t, filepath.Join(dir, "qb.safetensors"), nil, tF32("w", shapeW, v[1]["w"]))
	_, err = PlanArithmetic(&Arithmetic{Method: WeightedSum, A: qa, B: qb}, filepath.Join(dir, "x.safetensors"))
	wantErr(t, err, `tensor "w": q8_0 cannot be stored in safetensors`)
	// With a float type it merges the decoded values.
	g := merged(t, &Arithmetic{Method: WeightedSum, A: qa, B: qb, Type: "f32", Alpha: ptr(0)}, filepath.Join(dir, "x.safetensors"), 1, 0)
	deq := make([]float32, 512)
	c, _ := quant.Decoder(formats.Q8_0)
	c.Dequantize(deq, gq["w"].data)
	if !bytes.Equal(g["w"].data, f32(deq...)) {
		t.Error("alpha 0 of a q8_0 A is not A's decoded values")
	}
}

func TestArithmeticParameterErrors(t *testing.T) {
	dir := t.TempDir()
	pa, pb, pc, _ := abc(t, dir)
	out := filepath.Join(dir, "o.safetensors")
	cases := []struct {
		a    Arithmetic
		want string
	}{
		{Arithmetic{Method: "avg", A: pa, B: pb}, `unknown merge method "avg"`},
		{Arithmetic{Method: WeightedSum, A: pa}, "needs -a A and -b B"},
		{Arithmetic{Method: AddDifference, A: pa, B: pb}, "add_difference needs -c C"},
		{Arithmetic{Method: WeightedSum, A: pa, B: pb, C: pc}, "weighted_sum takes no -c"},
		{Arithmetic{Method: Slerp, A: pa, B: pb, C: pc}, "slerp takes no -c"},
		{Arithmetic{Method: TIES, A: pa, B: pb, Density: 1.5}, "Density 1.5"},
		{Arithmetic{Method: TIES, A: pa, B: pb, Density: -1}, "Density -1"},
		{Arithmetic{Method: DARE, A: pa, B: pb, DropP: ptr(1)}, "DropP 1"},
		{Arithmetic{Method: WeightedSum, A: pa, B: pb, Alpha: ptr(math.Inf(1))}, "Alpha +Inf"},
		{Arithmetic{Method: WeightedSum, A: pa, B: pb, AlphaRules: "(=1"}, "AlphaRules"},
		{Arithmetic{Method: WeightedSum, A: pa, B: filepath.Join(dir, "missing.safetensors")}, "missing.safetensors"},
		{Arithmetic{Method: WeightedSum, A: pa, B: pb, Type: "iq2_xxs"}, "iq2_xxs"},
	}
	for _, c := range cases {
		_, err := PlanArithmetic(&c.a, out)
		wantErr(t, err, c.want)
		noOutput(t, out)
	}
}

// The output's metadata: A's (same format), plus a description of the merge.
func TestArithmeticMetadata(t *testing.T) {
	dir := t.TempDir()
	pa, pb, _, _ := abc(t, dir)
	out := filepath.Join(dir, "o.safetensors")
	merged(t, &Arithmetic{Method: WeightedSum, A: pa, B: pb, Alpha: ptr(0.25)}, out, 1, 0)
	_, _, m := readAll(t, out)
	if v, _ := m.Metadata().String("from"); v != "a" {
		t.Errorf("A's metadata not kept: %v", m.Metadata())
	}
	if v, _ := m.Metadata().String("sdtool.merge"); v != "method=weighted_sum a=a.safetensors b=b.safetensors alpha=0.25" {
		t.Errorf("sdtool.merge = %q", v)
	}
}

func TestUniformIsCounterBased(t *testing.T) {
	k := Key(9, "t", 0)
	g := splitMix64{state: k}
	var sum float64
	for i := range int64(10000) {
		u := Uniform(k, i)
		if want := float64(g.next()>>11) / (1 << 53); u != want || u < 0 || u >= 1 {
			t.Fatalf("Uniform(k, %d) = %v, the sequential generator gives %v", i, u, want)
		}
		sum += u
	}
	if m := sum / 10000; math.Abs(m-0.5) > 0.02 {
		t.Errorf("mean %v", m)
	}
	if Key(9, "t", 0) == Key(9, "t", 1) || Key(9, "t", 0) == Key(9, "u", 0) || Key(9, "t", 0) == Key(10, "t", 0) {
		t.Error("keys collide")
	}
}

// A tensor of B that cannot be decoded is an error, even with --allow-missing.
func TestUndecodablePeer(t *testing.T) {
	dir := t.TempDir()
	pa := write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{4}, []float32{1, 2, 3, 4}))
	pb := write(t, filepath.Join(dir, "b.safetensors"), nil, testTensor{"w", formats.F6_E2M3, []int64{4}, []byte{1, 2, 3}})
	for _, allow := range []bool{false, true} {
		_, err := PlanArithmetic(&Arithmetic{Method: WeightedSum, A: pa, B: pb, AllowMissing: allow}, filepath.Join(dir, "o.safetensors"))
		wantErr(t, err, pb, `tensor "w"`, "f6_e2m3")
	}
}

// Cancelling during TIES's statistics pass stops the run and leaves no file.
func TestArithmeticInterrupted(t *testing.T) {
	dir := t.TempDir()
	pa := write(t, filepath.Join(dir, "a.safetensors"), nil, tF32("w", []int64{512, 512}, ramp(512*512, 1)))
	pb := write(t, filepath.Join(dir, "b.safetensors"), nil, tF32("w", []int64{512, 512}, ramp(512*512, 2)))
	out := filepath.Join(dir, "o.safetensors")
	p, err := PlanArithmetic(&Arithmetic{Method: TIES, A: pa, B: pb}, out)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	saved := statChunk
	statChunk = 1000
	defer func() { statChunk = saved }()
	ctx, cancel := context.WithCancel(context.Background())
	err = pipeline.Run(ctx, p, pipeline.Options{Threads: 2, Progress: func(done, total int64) { cancel() }})
	if !errors.Is(err, pipeline.ErrInterrupted) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	noOutput(t, out)
}
