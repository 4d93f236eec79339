//go:build cgo

package infer_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/internal/inferutil"
	"github.com/sdtool/sdtool/internal/longtest"

	"github.com/sdtool/sdtool/internal/synth"
)

// groupSizes returns the largest group of a loaded model and the size of
// the diffusion network's weights.
func groupSizes(m *infer.Model) (largest, network int64) {
	for _, g := range m.Weights.Pager.Groups {
		if infer.HasPrefix(g.Name, "model.diffusion_model") {
			network += g.Size
			largest = max(largest, g.Size)
		}
	}
	return largest, network
}

// netRun is one evaluation of a model's network on a prompt, as a sampling step makes it.
type netRun struct {
	path string
	in   infer.NetInput
}

// deepFlux writes TinyFlux with more blocks and T5 layers (the tiny
// file's one block of each kind is smaller than two streaming slots, so it
// never streams).
func deepFlux(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "deep-flux.gguf")
	f := synth.TinyFlux
	f.Double, f.Single = 2, 3
	t5 := *f.T5
	t5.Layers = 6
	f.T5 = &t5
	if err := f.WriteSingle(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func (r netRun) eval(t *testing.T, m *infer.Model) []float32 {
	t.Helper()
	return r.evalN(t, m, 1, nil)[0]
}

// evalN encodes the prompt once and runs the network n times, calling
// after (when not nil) after each run.
func (r netRun) evalN(t *testing.T, m *infer.Model, n int, after func(run int)) [][]float32 {
	t.Helper()
	cond, err := m.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	in := r.in
	in.Cond = cond
	in.X = make([]float32, in.W*in.H*m.Net.Channels())
	for i := range in.X {
		in.X[i] = float32(i%7) - 3
	}
	var outs [][]float32
	for range n {
		out, err := m.RunNet(&in, nil)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
		if after != nil {
			after(len(outs) - 1)
		}
	}
	return outs
}

var netRuns = []netRun{
	{"../testdata/tiny-sd1.gguf", infer.NetInput{W: 8, H: 8, T: 500}},
	{"../testdata/tiny-sdxl.gguf", infer.NetInput{W: 8, H: 8, T: 500}},
	{"deep-flux.gguf", infer.NetInput{W: 4, H: 4, T: 0.5, Guidance: 3.5}},
}

// A network run within a budget that holds only part of its weights gives
// the same bits as with every weight resident, reads each streamed block
// once per graph (the graphs' nodes follow their blocks), frees the text
// encoders before it runs and keeps no more resident than the budget allows.
func TestStreamedMatchesResident(t *testing.T) {
	longtest.Skip(t, "streamed against resident renders of every tiny family")
	for _, r := range netRuns {
		t.Run(filepath.Base(r.path), func(t *testing.T) {
			if r.path == "deep-flux.gguf" {
				r.path = deepFlux(t)
			}
			want := r.eval(t, inferutil.LoadTiny(t, r.path))
			// A budget larger than the model: every weight resident, the
			// graphs in the order streaming gives them.
			whole, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			if got := r.eval(t, whole); !slices.Equal(got, want) {
				t.Errorf("the network's output in streaming's node order differs from ggml's order")
			}
			if st := whole.Memory(); st.Streamed != 0 || st.Resident == 0 {
				t.Errorf("with a large budget: %+v, want the weights read resident and none streamed", st)
			}
			largest, network := groupSizes(whole)
			compute := whole.Alloc.Size()
			for i, budget := range []int64{2*largest + compute, compute + largest + network/2} {
				m, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: budget})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				// Twice at the least budget: each run reads the first
				// streamed block ahead for the next, which starts from it.
				outs := r.evalN(t, m, 2-i, func(run int) {
					p := m.Weights.Pager
					first := -1
					for _, u := range p.Uses {
						if p.Groups[u.Group].Buf == nil {
							first = u.Group
							break
						}
					}
					if first >= 0 && !slices.Contains(p.SlotHas[:], first) {
						t.Errorf("budget %d, run %d: the slots hold %v, not the first streamed block %d", budget, run, p.SlotHas, first)
					}
				})
				for run, got := range outs {
					if !slices.Equal(got, want) {
						t.Errorf("budget %d, run %d: the streamed network's output differs from the resident one's", budget, run)
					}
				}
				st := m.Memory()
				if st.Streamed == 0 || st.StreamedGroups == 0 || st.Reread != 0 {
					t.Errorf("budget %d (network %d, largest block %d): %+v, want blocks streamed, each once per graph", budget, network, largest, st)
				}
				if m.Weights.Pager.Resident+st.Slots+st.Compute > budget {
					t.Errorf("budget %d: %d resident + %d slots + %d compute", budget, m.Weights.Pager.Resident, st.Slots, st.Compute)
				}
				for _, g := range m.Weights.Pager.Groups {
					if g.Buf != nil && !infer.HasPrefix(g.Name, "model.diffusion_model") {
						t.Errorf("budget %d: %s is still resident while the network runs", budget, g.Name)
					}
				}
			}
		})
	}
}

// A budget that cannot hold two of the largest block is refused at load,
// naming the block and the size needed.
func TestStreamBudgetTooSmall(t *testing.T) {
	m := inferutil.LoadTiny(t, "../testdata/tiny-flux.gguf")
	name, largest := m.Weights.Pager.Groups[m.Weights.Pager.Largest].Name, m.Weights.Pager.Groups[m.Weights.Pager.Largest].Size
	_, err := infer.Load(infer.Components{"model": "../testdata/tiny-flux.gguf"}, infer.LoadOptions{Threads: 1, MaxMemory: largest})
	var be *infer.BudgetError
	if !errors.As(err, &be) || be.Block != name || be.Bytes != largest {
		t.Fatalf("Load with a budget of one block: %v, want a BudgetError naming %q of %d bytes", err, name, largest)
	}
	if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "tiny-flux.gguf") {
		t.Errorf("error %q names neither the block nor the file", err)
	}
}

// A file truncated, or rewritten, after load is an error naming a tensor
// when its blocks are next streamed, not a crash or a wrong image.
func TestStreamFileChanged(t *testing.T) {
	r := netRun{"../testdata/tiny-flux.gguf", netRuns[2].in}
	data, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	whole := inferutil.LoadTiny(t, r.path)
	r.eval(t, whole)
	largest, _ := groupSizes(whole)
	budget := 2*largest + whole.Alloc.Size()
	for _, change := range []struct {
		name string
		do   func(path string) error
	}{
		{"truncated", func(path string) error { return os.Truncate(path, int64(len(data))/2) }},
		{"rewritten", func(path string) error { return os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)) }},
	} {
		t.Run(change.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "flux.gguf")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: 1, MaxMemory: budget})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := change.do(path); err != nil {
				t.Fatal(err)
			}
			_, err = m.Encode("a cat", 64, 64)
			if err == nil || !strings.Contains(err.Error(), path+": tensor ") || !strings.Contains(err.Error(), "changed") {
				t.Errorf("a graph after the file was %s: %v, want an error naming the file and a tensor", change.name, err)
			}
		})
	}
}

// A text encoder run within a budget that holds only part of its layers
// conditions exactly as with every layer resident, each layer read once.
func TestStreamedTextEncoder(t *testing.T) {
	path := deepFlux(t)
	whole := inferutil.LoadTiny(t, path)
	want, err := whole.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	var largest, t5 int64
	for _, g := range whole.Weights.Pager.Groups {
		if infer.HasPrefix(g.Name, "text_encoders.t5xxl") {
			t5 += g.Size
			largest = max(largest, g.Size)
		}
	}
	budget := whole.Alloc.Size() + 2*largest + (t5-2*largest)/3
	m, err := infer.Load(infer.Components{"model": path}, infer.LoadOptions{Threads: 1, MaxMemory: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := m.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Context, want.Context) || !slices.Equal(got.Vector, want.Vector) {
		t.Error("the streamed text encoders' conditioning differs from the resident one's")
	}
	if st := m.Memory(); st.Streamed == 0 || st.Reread != 0 {
		t.Errorf("budget %d for %d bytes of T5: %+v, want layers streamed, each once", budget, t5, st)
	}
}

// Release frees the compute buffer with the weights: it only grows, to
// the largest graph run, and a model released for another (--compare's
// reference) must hold nothing outside that model's budget. The network
// then runs again with the same bits.
func TestReleaseFreesComputeBuffer(t *testing.T) {
	r := netRuns[0]
	m, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := r.eval(t, m)
	if m.Alloc.Size() == 0 || m.Weights.Pager.Resident == 0 {
		t.Fatalf("after a run: compute buffer %d bytes, %d resident", m.Alloc.Size(), m.Weights.Pager.Resident)
	}
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
	if m.Alloc.Size() != 0 || m.Weights.Pager.Resident != 0 {
		t.Errorf("after Release: compute buffer %d bytes, %d resident; want nothing held", m.Alloc.Size(), m.Weights.Pager.Resident)
	}
	if got := r.eval(t, m); !slices.Equal(got, want) {
		t.Error("the network's output after Release differs from before")
	}
}

// What the caller holds outside the budget (LoadOptions.Held) and the
// block outputs a network run captures come off the budget, with the same
// bits: a budget that holds the network's weights beside the compute
// buffer streams when the caller holds all of it but half the network's weights,
// and sheds its resident weights when a capture takes the last of the
// room; what is resident, the slots, the compute buffer and what is held
// stay within the budget.
func TestBudgetLeavesRoomForHeld(t *testing.T) {
	r := netRuns[0]
	whole, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	cond, err := whole.Encode("a cat", 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	in := r.in
	in.Cond, in.X = cond, make([]float32, in.W*in.H*whole.Net.Channels())
	run := func(m *infer.Model, blocks *[]infer.BlockOutput) []float32 {
		out, err := m.RunNet(&in, blocks)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The network alone on a model that encoded nothing: its compute buffer.
	net, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	var blocks []infer.BlockOutput
	want := run(net, &blocks)
	var captured int64
	for _, b := range blocks {
		captured += 4 * int64(len(b.Values))
	}
	if captured == 0 || net.Memory().Held != captured {
		t.Errorf("a run captured %d bytes of block outputs; the pager counted %d", captured, net.Memory().Held)
	}
	_, network := groupSizes(net)
	// The compute buffer of a capturing run in a budget's node order.
	probe, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: network + 4*net.Alloc.Size()})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	run(probe, &[]infer.BlockOutput{})
	compute := probe.Memory().Compute
	budget := network + compute + captured/2 // the network alone runs here
	for _, c := range []struct {
		held    int64
		capture bool
		streams bool
	}{{0, false, false}, {budget - compute - network/2, false, true}, {captured / 2, true, true}} {
		m, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: budget, Held: c.held})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var got [][]float32
		for k := range 2 {
			var b *[]infer.BlockOutput
			if c.capture && k == 0 {
				b = &[]infer.BlockOutput{}
			}
			got = append(got, run(m, b))
		}
		if !slices.Equal(got[0], want) || !slices.Equal(got[1], want) {
			t.Errorf("held %d, capture %v: the network's output differs from the resident one's", c.held, c.capture)
		}
		st := m.Memory()
		if streams := st.Streamed > 0; streams != c.streams {
			t.Errorf("held %d, capture %v, budget %d: %+v; want streaming %v", c.held, c.capture, budget, st, c.streams)
		}
		if m.Weights.Pager.Resident+st.Slots+st.Compute+st.Held > budget {
			t.Errorf("held %d, capture %v: %d resident + %d slots + %d compute + %d held, over the budget %d",
				c.held, c.capture, m.Weights.Pager.Resident, st.Slots, st.Compute, st.Held, budget)
		}
	}
}

// A budget read again as graphs need weights (LoadOptions.Rebudget)
// streams when it falls below the network's weights, with the same bits,
// and keeps what is resident, the slots and the compute buffer within the
// last budget it gave; MaxMemory stays its ceiling.
func TestRebudget(t *testing.T) {
	r := netRuns[0]
	whole, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	want := r.eval(t, whole)
	largest, network := groupSizes(whole)
	low := 2*largest + whole.Alloc.Size() + network/4
	for _, c := range []struct {
		max, rebudget int64
		streams       bool
	}{{1 << 40, 1 << 40, false}, {1 << 40, low, true}, {low, 1 << 40, true}} {
		var asked []int64
		m, err := infer.Load(infer.Components{"model": r.path}, infer.LoadOptions{Threads: 1, MaxMemory: c.max,
			Rebudget: func(holding int64) int64 { asked = append(asked, holding); return c.rebudget }})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := r.eval(t, m); !slices.Equal(got, want) {
			t.Errorf("max %d, rebudget %d: the network's output differs from the resident one's", c.max, c.rebudget)
		}
		st := m.Memory()
		if streams := st.Streamed > 0; streams != c.streams || len(asked) == 0 {
			t.Errorf("max %d, rebudget %d: %+v, asked %d times; want streaming %v", c.max, c.rebudget, st, len(asked), c.streams)
		}
		if b := min(c.max, c.rebudget); st.Budget != b || m.Weights.Pager.Resident+st.Slots+st.Compute > b {
			t.Errorf("max %d, rebudget %d: budget %d; %d resident + %d slots + %d compute over %d",
				c.max, c.rebudget, st.Budget, m.Weights.Pager.Resident, st.Slots, st.Compute, b)
		}
	}
}

// A model that holds its parts in turn (LoadOptions.PartsInTurn) renders
// the same pixels as one that keeps them, twice in a row (the second render
// reads the parts again), while holding at most the largest part's weights:
// never the text encoder, the network and the VAE at once.
func TestPartsInTurn(t *testing.T) {
	req := infer.Request{Prompt: "a cat", Width: 32, Height: 32, Steps: 1, CFGScale: 7, Seed: 3}
	render := func(inTurn bool, n int) ([][]float32, infer.MemoryStats) {
		m, err := infer.Load(infer.Components{"model": "../testdata/tiny-sd1.gguf"},
			infer.LoadOptions{Threads: 1, MaxMemory: 1 << 40, PartsInTurn: inTurn, VAEDecodeOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var out [][]float32
		for range n {
			res, err := m.Generate(req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res.Pixels)
		}
		return out, m.Memory()
	}
	kept, whole := render(false, 1)
	turned, inTurn := render(true, 2)
	t.Logf("weights %d bytes; at most %d resident at once kept, %d in turn", whole.Weights, whole.Resident, inTurn.Resident)
	for i := range turned {
		if !slices.Equal(kept[0], turned[i]) {
			t.Errorf("render %d: the pixels differ when the parts are held in turn", i+1)
		}
	}
	if whole.Resident != whole.Weights {
		t.Errorf("kept: %d of %d weight bytes resident at most, want all", whole.Resident, whole.Weights)
	}
	if inTurn.Resident <= 0 || inTurn.Resident >= whole.Weights*9/10 {
		t.Errorf("in turn: %d of %d weight bytes resident at most, want the largest part's", inTurn.Resident, whole.Weights)
	}
}
