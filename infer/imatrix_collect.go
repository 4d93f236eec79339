package infer

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/sdtool/sdtool/quant/imatrix"
)

// Importance-matrix collection while generating (the statistics behind
// `generate --imatrix-out`). Every matrix product whose left operand is a
// UNet or text-encoder weight (graph.linear: attention projections, feed
// forward, time and class embeddings, CLIP's MLPs) adds, per input column
// j, Σx_j² over every row and slice of its activation, the rows seen and
// one call, as stable-diffusion.cpp's collector does for MUL_MAT. The VAE
// is not collected, and neither are convolutions (including SD 1.x's 1x1
// proj_in/proj_out), which sd.cpp computes through im2col or conv_2d and so
// never collects either. The statistics are keyed by the weight's Go-side
// identity and named with the tensor's name in the model file, never with
// the ggml tensor name (ggml cuts names to 63 bytes).

// ImatrixStats accumulates imatrix statistics over any number of
// generations of one model; Model.SetImatrix turns collection on.
type ImatrixStats struct {
	mu     sync.Mutex
	byName map[string]*imatAcc
	evals  int // graph evaluations that collected something
	net    int // diffusion-network evaluations
	rows   int // largest rows per call seen (the chunk size written to GGUF)
	// skipped counts non-finite activation values left out.
	skipped int

	// CaptureName, when set (tests), keeps the activation of that weight's
	// products in captured, one slice per call.
	CaptureName string
	Captured    [][]float32
}

// imatAcc is one weight's running sums (float64, so that long calibration
// runs do not lose the small columns).
type imatAcc struct {
	sum2   []float64
	finite []float64 // values that entered sum2, per column
	amax   []float32 // largest finite |x| per column
	rows   float64
	calls  int
}

// NewImatrixStats returns empty statistics.
func NewImatrixStats() *ImatrixStats {
	return &ImatrixStats{byName: map[string]*imatAcc{}}
}

// Add records one product of weight name: sum2 holds Σx² per input column
// over the finite values of an activation with rows rows, finite how many
// values each column had, amax their largest magnitude. Non-finite values
// are left out (reported once), as stable-diffusion.cpp does; Matrix turns
// each column's sum into the mean over its finite values.
func (s *ImatrixStats) Add(name string, sum2, finite, amax []float32, rows int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.byName[name]
	if !ok {
		a = &imatAcc{sum2: make([]float64, len(sum2)), finite: make([]float64, len(sum2)), amax: make([]float32, len(sum2))}
		s.byName[name] = a
	}
	if len(a.sum2) != len(sum2) || len(finite) != len(sum2) || len(amax) != len(sum2) {
		return fmt.Errorf("imatrix: weight %q: %d input columns, earlier products had %d", name, len(sum2), len(a.sum2))
	}
	for j, v := range sum2 {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			// The squares of finite values overflowed float32: drop the column's call.
			s.warnNonFinite(name, rows)
			continue
		}
		a.sum2[j] += float64(v)
		a.finite[j] += float64(finite[j])
		a.amax[j] = max(a.amax[j], amax[j])
		if miss := rows - int64(finite[j]); miss > 0 {
			s.warnNonFinite(name, miss)
		}
	}
	a.rows += float64(rows)
	a.calls++
	s.rows = max(s.rows, int(rows))
	return nil
}

// warnNonFinite counts n left-out values and warns the first time.
func (s *ImatrixStats) warnNonFinite(name string, n int64) {
	if s.skipped == 0 {
		slog.Warn("imatrix: non-finite activations are left out of the statistics", "weight", name)
	}
	s.skipped += int(n)
}

// evaluated counts one graph evaluation (net says whether it was the diffusion network's).
func (s *ImatrixStats) evaluated(net bool) {
	s.mu.Lock()
	s.evals++
	if net {
		s.net++
	}
	s.mu.Unlock()
}

// Len returns the number of weights with statistics.
func (s *ImatrixStats) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byName)
}

// Skipped returns the number of non-finite activation values left out.
func (s *ImatrixStats) Skipped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

// Matrix returns the statistics as an imatrix: per weight (names sorted)
// Sum2 = Σx² per column, Counts = [rows seen], NCall = products seen,
// AbsMax = the largest |x| per column.
// ChunkCount is the number of UNet evaluations and ChunkSize the largest
// rows one product saw (usually the latent's pixels, what one UNet call
// shows its first-level attention; 77 text tokens for small latents), which
// llama.cpp's GGUF reader divides counts by to estimate calls; the calls of
// other layers are not recovered exactly that way (ContinueImatrix does
// recover them). dataset names the calibration prompts.
func (s *ImatrixStats) Matrix(dataset string) *imatrix.Matrix {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	m := &imatrix.Matrix{ChunkCount: s.net, ChunkSize: s.rows}
	if dataset != "" {
		m.Datasets = []string{dataset}
	}
	for _, n := range names {
		a := s.byName[n]
		e := &imatrix.Entry{Name: n, Sum2: make([]float32, len(a.sum2)), Counts: []float32{float32(a.rows)}, NCall: a.calls,
			AbsMax: slices.Clone(a.amax)}
		for j, v := range a.sum2 {
			if a.finite[j] < a.rows && a.finite[j] > 0 {
				// Some values were left out: scale the column so that
				// Sum2/Counts is still the mean over its finite values.
				v *= a.rows / a.finite[j]
			}
			e.Sum2[j] = float32(v)
		}
		m.Entries = append(m.Entries, e)
	}
	return m
}

// ContinueImatrix merges earlier imatrix files (priors, read with
// imatrix.Open; files names them for errors) into freshly collected
// statistics the way llama-imatrix continues from --in-file: squared sums
// and row counts add up, so each mean is the row-weighted mean over every
// run. A legacy .dat entry stores mean×ncall with no row count; it is
// scaled back to sums with the rows per call that this run saw for the
// same weight (llama.cpp uses its chunk size there), and a GGUF entry's
// call count is recovered the same way. Entries this run did not see are
// kept as they are.
func ContinueImatrix(collected *imatrix.Matrix, files []string, priors []*imatrix.Matrix) (*imatrix.Matrix, error) {
	all := make([]*imatrix.Matrix, 0, len(priors)+1)
	for _, p := range priors {
		q := &imatrix.Matrix{Datasets: p.Datasets, ChunkCount: p.ChunkCount, ChunkSize: p.ChunkSize}
		for _, e := range p.Entries {
			c := &imatrix.Entry{Name: e.Name, NCall: e.NCall, Sum2: append([]float32(nil), e.Sum2...), Counts: append([]float32(nil), e.Counts...),
				AbsMax: slices.Clone(e.AbsMax)}
			if cur, ok := collected.Lookup(e.Name); ok && cur.NCall > 0 && len(cur.Counts) == 1 && len(c.Counts) == 1 {
				perCall := float64(cur.Counts[0]) / float64(cur.NCall)
				if c.Counts[0] == float32(c.NCall) {
					// Legacy: Sum2 is mean×ncall.
					for j := range c.Sum2 {
						c.Sum2[j] = float32(float64(c.Sum2[j]) * perCall)
					}
					c.Counts[0] = float32(float64(c.NCall) * perCall)
				} else if perCall > 0 {
					c.NCall = int(math.Round(float64(c.Counts[0]) / perCall))
				}
			}
			q.Entries = append(q.Entries, c)
		}
		all = append(all, q)
	}
	all = append(all, collected)
	names := append(append([]string(nil), files...), "collected statistics")
	return imatrix.Merge(names, all, imatrix.MergeLlama)
}
