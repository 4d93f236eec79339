//go:build cgo

package infer_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/encoder/clip"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/quant/imatrix"
)

const tinyCaptured = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"

func TestImatrixCollect(t *testing.T) {
	m := inferutil.LoadTiny(t, "../testdata/tiny-sd1.gguf")
	const size, steps = 64, 2
	req := infer.Request{Prompt: "a cat", Negative: "blurry", Width: size, Height: size, Steps: steps, CFGScale: 7, Seed: 3, Method: infer.Euler}
	plain, err := m.Generate(req)
	if err != nil {
		t.Fatal(err)
	}
	s, res := inferutil.CollectTiny(t, m, req, tinyCaptured)
	if !slices.Equal(plain.Pixels, res.Pixels) {
		t.Error("collecting changed the image")
	}
	mx := s.Matrix("test")

	// Every linear weight of the UNet and the text encoder, nothing else:
	// 2-D .weight tensors outside the VAE except CLIP's embeddings (read
	// with get_rows and a view, not a product).
	shapes := map[string][]int64{}
	var want []string
	for _, sp := range m.Specs {
		shapes[sp.Src.Name] = sp.Shape
		if len(sp.Shape) == 2 && strings.HasSuffix(sp.Name, ".weight") && !strings.HasPrefix(sp.Name, infer.VAEPfx) &&
			!strings.Contains(sp.Name, "embeddings.") {
			want = append(want, sp.Src.Name)
		}
	}
	if clip.CLIPEncoders(m.Config)[0].Skip > 1 {
		t.Skip("the tiny model is expected to use the last CLIP layer")
	}
	slices.Sort(want)
	if got := mx.Names(); !slices.Equal(got, want) {
		t.Fatalf("entries:\n got %q\nwant %q", got, want)
	}
	for _, e := range mx.Entries {
		if in := shapes[e.Name][1]; int64(len(e.Sum2)) != in {
			t.Errorf("%s: %d values, want %d (input features)", e.Name, len(e.Sum2), in)
		}
	}

	// Rows seen: latent pixels (64/8)² per UNet call at the first level, a
	// quarter one level down, 77 context tokens for cross-attention keys,
	// one row for the time embedding; two UNet calls per step (CFG), two
	// text-encoder calls (prompt and negative prompt).
	lat := float32((size / 8) * (size / 8))
	unetCalls := float32(2 * steps)
	p := "model.diffusion_model."
	counts := []struct {
		name  string
		rows  float32
		calls int
	}{
		{p + "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", lat * unetCalls, 2 * steps},
		{p + "input_blocks.1.1.transformer_blocks.0.ff.net.2.weight", lat * unetCalls, 2 * steps},
		{p + "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight", 77 * unetCalls, 2 * steps},
		{p + "time_embed.0.weight", unetCalls, 2 * steps},
		{p + "input_blocks.1.0.emb_layers.1.weight", unetCalls, 2 * steps},
		{"cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight", 2 * 77, 2},
	}
	for _, c := range counts {
		e, ok := mx.Lookup(c.name)
		if !ok {
			t.Errorf("no entry %s", c.name)
			continue
		}
		if e.Counts[0] != c.rows || e.NCall != c.calls {
			t.Errorf("%s: %v rows in %d calls, want %v in %d", c.name, e.Counts[0], e.NCall, c.rows, c.calls)
		}
	}
	if mx.ChunkCount != int(unetCalls) || mx.ChunkSize != int(lat) && mx.ChunkSize != 77 {
		t.Errorf("chunk count %d size %d", mx.ChunkCount, mx.ChunkSize)
	}

	// Σx² and max |x| of the captured layer, recomputed in Go from its inputs.
	e, _ := mx.Lookup(tinyCaptured)
	if len(s.Captured) != 2*steps {
		t.Fatalf("captured %d activations, want %d", len(s.Captured), 2*steps)
	}
	in := len(e.Sum2)
	ref, big := make([]float64, in), make([]float32, in)
	for _, x := range s.Captured {
		if len(x) != in*int(lat) {
			t.Fatalf("captured %d values, want %d", len(x), in*int(lat))
		}
		for i, v := range x {
			ref[i%in] += float64(v) * float64(v)
			big[i%in] = max(big[i%in], float32(math.Abs(float64(v))))
		}
	}
	for j := range ref {
		if d := math.Abs(float64(e.Sum2[j]) - ref[j]); d > 1e-4*ref[j]+1e-6 {
			t.Fatalf("column %d: Σx² %v, Go recomputation %v", j, e.Sum2[j], ref[j])
		}
	}
	if !slices.Equal(e.AbsMax, big) {
		t.Errorf("max |x| per column %v, Go recomputation %v", e.AbsMax, big)
	}
	if s.Skipped() != 0 {
		t.Errorf("%d products skipped", s.Skipped())
	}
}

// Continuing from an earlier file gives what one run over both prompts
// gives, whichever format the earlier file has.
func TestImatrixContinue(t *testing.T) {
	longtest.Skip(t, "an importance matrix continued over two runs")
	m := inferutil.LoadTiny(t, "../testdata/tiny-sd1.gguf")
	a := infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 7, Seed: 1, Method: infer.Euler}
	b := a
	b.Prompt, b.Seed = "a red house", 2
	sa, _ := inferutil.CollectTiny(t, m, a, "")
	sb, _ := inferutil.CollectTiny(t, m, b, "")
	both := infer.NewImatrixStats()
	m.SetImatrix(both)
	for _, r := range []infer.Request{a, b} {
		if _, err := m.Generate(r); err != nil {
			t.Fatal(err)
		}
	}
	m.SetImatrix(nil)
	want := both.Matrix("")

	dir := t.TempDir()
	for _, ext := range []string{".dat", ".gguf"} {
		path := filepath.Join(dir, "a"+ext)
		var buf bytes.Buffer
		var err error
		if ext == ".dat" {
			err = imatrix.WriteDat(&buf, sa.Matrix(""))
		} else {
			_, err = imatrix.WriteGGUF(&buf, sa.Matrix(""))
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		prior, err := imatrix.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := infer.ContinueImatrix(sb.Matrix(""), []string{path}, []*imatrix.Matrix{prior})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Names(), want.Names()) {
			t.Fatalf("%s: entries differ", ext)
		}
		for _, name := range want.Names() {
			we, _ := want.Lookup(name)
			ge, _ := got.Lookup(name)
			if ge.NCall != we.NCall {
				t.Errorf("%s: %s: %d calls, want %d", ext, name, ge.NCall, we.NCall)
			}
			if d := math.Abs(float64(ge.Counts[0] - we.Counts[0])); d > 1e-6*float64(we.Counts[0]) {
				t.Errorf("%s: %s: %v rows, want %v", ext, name, ge.Counts[0], we.Counts[0])
			}
			gs, ws := ge.Stored(), we.Stored()
			for j := range ws {
				if d := math.Abs(float64(gs[j] - ws[j])); d > 1e-5*math.Abs(float64(ws[j]))+1e-7 {
					t.Errorf("%s: %s[%d]: stored %v, want %v", ext, name, j, gs[j], ws[j])
					break
				}
			}
		}
	}
}

// The statistics refuse a weight whose width changes and report the mean
// over finite values when some were left out.
func TestImatrixStatsAdd(t *testing.T) {
	s := infer.NewImatrixStats()
	if err := s.Add("w", []float32{2, 4}, []float32{2, 2}, []float32{1, 1.5}, 2); err != nil {
		t.Fatal(err)
	}
	// Column 0 had one non-finite value of two; column 1 overflowed.
	if err := s.Add("w", []float32{3, float32(math.Inf(1))}, []float32{1, 2}, []float32{1.7, 1}, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("w", []float32{1, 2, 3}, []float32{1, 1, 1}, []float32{1, 1, 1}, 2); err == nil {
		t.Error("a different width was accepted")
	}
	e, _ := s.Matrix("").Lookup("w")
	// Column 0: mean (2+3)/3 over its finite values, times 4 rows = 20/3.
	// Column 1: only the first call counts, mean 4/2, times 4 rows = 8.
	// Skipped: one value of column 0 and the two of column 1's call.
	if s.Skipped() != 3 || e.NCall != 2 || e.Counts[0] != 4 {
		t.Errorf("skipped %d, entry %+v", s.Skipped(), e)
	}
	if math.Abs(float64(e.Sum2[0])-20.0/3) > 1e-5 || e.Sum2[1] != 8 {
		t.Errorf("sums %v, want [6.667 8]", e.Sum2)
	}
	if !slices.Equal(e.AbsMax, []float32{1.7, 1.5}) {
		t.Errorf("maxima %v, want [1.7 1.5]", e.AbsMax)
	}
}

// The column-squares op against Go, on contiguous and permuted activations
// with non-finite values, wider than one 256-column block and split over
// two threads.
func TestColumnSquaresOp(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, nil)
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		ne      []int64
		permute bool
	}{{[]int64{300, 7, 2}, false}, {[]int64{5, 300, 3}, true}, {[]int64{1, 1, 1}, false}} {
		x := inferutil.Randn(r, int(c.ne[0]*c.ne[1]*c.ne[2]), 2)
		x[3%len(x)] = float32(math.NaN())
		if len(x) > 10 {
			x[10] = float32(math.Inf(-1))
		}
		got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: c.ne, Data: x}}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
			v := in[0]
			if c.permute {
				v = g.Ctx.Permute(v, 1, 0, 2, 3) // ne [n1, n0, n2], not contiguous
			}
			return g.Ctx.ColumnSquares(v)
		})
		k, rows := c.ne[0], c.ne[1]*c.ne[2]
		col := func(i int) int64 { return int64(i) % k }
		if c.permute {
			k, rows = c.ne[1], c.ne[0]*c.ne[2]
			col = func(i int) int64 { return (int64(i) / c.ne[0]) % c.ne[1] }
		}
		if ne[0] != k || ne[1] != 3 {
			t.Fatalf("%v: output %v", c.ne, ne)
		}
		sum, cnt, big := make([]float64, k), make([]float64, k), make([]float64, k)
		for i, v := range x {
			if f := float64(v); !math.IsNaN(f) && !math.IsInf(f, 0) {
				sum[col(i)] += f * f
				cnt[col(i)]++
				big[col(i)] = max(big[col(i)], math.Abs(f))
			}
		}
		var total float64
		for j := range sum {
			if math.Abs(float64(got[j])-sum[j]) > 1e-5*sum[j] || float64(got[int(k)+j]) != cnt[j] || float64(got[2*int(k)+j]) != big[j] {
				t.Fatalf("%v permute=%v column %d: %v (%v finite, max %v), want %v (%v, %v)", c.ne, c.permute, j, got[j], got[int(k)+j], got[2*int(k)+j], sum[j], cnt[j], big[j])
			}
			total += cnt[j]
		}
		if want := float64(rows*k) - 1 - float64(min(1, len(x)/11)); total != want && len(x) > 1 {
			t.Errorf("%v: %v finite values, want %v", c.ne, total, want)
		}
	}
}

// goldenSD15Imatrix is the imatrix sd-cli wrote for one 64x64 step of a
// full-size SD 1.5 architecture (see ../shared/data/sdcli-golden/README.md).
const goldenSD15Imatrix = "../../shared/data/sdcli-golden/sd15-sdcli.imatrix.dat"

// namePattern replaces the numbers of a tensor name, so that layers of
// models of different depth compare.
func namePattern(s string) string {
	var b strings.Builder
	digits := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// The kinds of weights collected are the kinds sd-cli collects: every
// layer pattern of the tiny model's entries appears in sd-cli's SD 1.5
// file, and every pattern there appears here.
func TestImatrixKindsMatchSDCLI(t *testing.T) {
	golden, err := imatrix.OpenDat(goldenSD15Imatrix)
	if os.IsNotExist(err) {
		t.Skip("no sd-cli golden imatrix")
	}
	if err != nil {
		t.Fatal(err)
	}
	m := inferutil.LoadTiny(t, "../testdata/tiny-sd1.gguf")
	s, _ := inferutil.CollectTiny(t, m, infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 7, Seed: 1}, "")
	ours := map[string]bool{}
	for _, n := range s.Matrix("").Names() {
		ours[namePattern(n)] = true
	}
	theirs := map[string]bool{}
	for _, n := range golden.Names() {
		theirs[namePattern(n)] = true
	}
	for p := range ours {
		if !theirs[p] {
			t.Errorf("we collect %s, sd-cli does not", p)
		}
	}
	for p := range theirs {
		if !ours[p] {
			t.Errorf("sd-cli collects %s, we do not", p)
		}
	}
}

// With SDTOOL_SD15_MODEL naming a full-size SD 1.5 model (for example
// `go run ./internal/synth/cmd/gensynth -sd sd15 -o /tmp/sd15.gguf`), one
// 64x64 step collects exactly sd-cli's entries: names, lengths and calls.
func TestImatrixEntriesMatchSDCLI(t *testing.T) {
	path := os.Getenv("SDTOOL_SD15_MODEL")
	if path == "" {
		t.Skip("SDTOOL_SD15_MODEL is not set")
	}
	golden, err := imatrix.OpenDat(goldenSD15Imatrix)
	if os.IsNotExist(err) {
		t.Skip("no sd-cli golden imatrix")
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, _ := inferutil.CollectTiny(t, m, infer.Request{Prompt: "a cat", Width: 64, Height: 64, Steps: 1, CFGScale: 7, Seed: 1}, "")
	ours := s.Matrix("")
	if !slices.Equal(ours.Names(), golden.Names()) {
		t.Fatalf("%d entries, sd-cli %d; first names %q vs %q", len(ours.Entries), len(golden.Entries), ours.Names()[:3], golden.Names()[:3])
	}
	for _, g := range golden.Entries {
		e, _ := ours.Lookup(g.Name)
		if len(e.Sum2) != len(g.Sum2) || e.NCall != g.NCall {
			t.Errorf("%s: %d values in %d calls, sd-cli %d in %d", g.Name, len(e.Sum2), e.NCall, len(g.Sum2), g.NCall)
		}
	}
}

// A group measures its activations one after the other: sums of all, then
// finite counts of all, then largest magnitudes of all.
func TestColumnSquaresGroup(t *testing.T) {
	be := inferutil.NewTestBackend(t)
	ws := inferutil.MakeWeights(t, be, nil)
	a := []float32{1, 2, 3, 4, 5, 6}              // [3, 2]
	b := []float32{1, -3, 2, float32(math.NaN())} // [2, 2]
	got, ne := inferutil.RunGraph(t, be, ws, []inferutil.TestInput{{Ne: []int64{3, 2}, Data: a}, {Ne: []int64{2, 2}, Data: b}}, func(g *infer.Builder, in []native.Tensor) native.Tensor {
		return g.Ctx.ColumnSquares(in[0], in[1])
	})
	want := []float32{1 + 16, 4 + 25, 9 + 36, 1 + 4, 9, 2, 2, 2, 2, 1, 4, 5, 6, 2, 3}
	if ne[0] != 5 || !slices.Equal(got, want) {
		t.Errorf("got %v (ne %v), want %v", got, ne, want)
	}
}
