//go:build cgo

package infer

import (
	"strings"

	"github.com/sdtool/sdtool/native"
)

// imatrixPass is the collection state of one graph: the products it
// watches and, after compute, their per-column sums to read back.
type imatrixPass struct {
	stats *ImatrixStats
	names map[native.Tensor]imatWeight // collected weights
	taps  []imatrixTap
	unet  bool
}

// imatWeight names a collected weight.
type imatWeight struct {
	file string // the name in the model file (the entry name)
	unet bool
}

// imatrixTap is one watched product W·x.
type imatrixTap struct {
	name string
	sum  native.Tensor // [in, 2]: Σx² and finite values per column
	rows int64
	x    native.Tensor // kept only for the test capture
}

// SetImatrix turns imatrix collection on for every later generation of m
// (the UNet and the text encoder; see ImatrixStats), accumulating into s;
// nil turns it off.
func (m *Model) SetImatrix(s *ImatrixStats) {
	m.imat = s
	if s == nil || m.imatNames != nil {
		return
	}
	m.imatNames = map[native.Tensor]imatWeight{}
	for _, sp := range m.specs {
		// sd.cpp collects only model weights (model., cond_stage_model.),
		// never the VAE (first_stage_model.).
		if !strings.HasPrefix(sp.Name, unetPrefix) && !strings.HasPrefix(sp.Name, "cond_stage_model.") {
			continue
		}
		if len(sp.Shape) != 2 || !strings.HasSuffix(sp.Name, ".weight") {
			continue
		}
		if t, ok := m.w.get(sp.Name); ok {
			m.imatNames[t] = imatWeight{file: sp.src.Name, unet: strings.HasPrefix(sp.Name, unetPrefix)}
		}
	}
}

// imatrixPass returns the collection state for a new graph, nil when off.
func (m *Model) imatrixPass() *imatrixPass {
	if m.imat == nil {
		return nil
	}
	return &imatrixPass{stats: m.imat, names: m.imatNames}
}

// watch records the product w·x when w is a collected weight: the graph
// also computes Σx² per input column, marked as an output.
func (g *graph) watch(w, x native.Tensor) {
	p := g.imat
	if p == nil {
		return
	}
	iw, ok := p.names[w]
	if !ok {
		return
	}
	name := iw.file
	ne := x.Ne()
	tap := imatrixTap{name: name, sum: g.c.ColumnSquares(x).SetOutput(), rows: ne[1] * ne[2] * ne[3]}
	if name == p.stats.captureName {
		tap.x = g.c.Cont(x).SetOutput()
	}
	p.unet = p.unet || iw.unet
	p.taps = append(p.taps, tap)
}

// expand adds the watched sums to gr ahead of the main output, so that
// each sum is scheduled right after its activation exists and the
// activation's memory is reused as usual rather than held to the end.
func (p *imatrixPass) expand(gr *native.Graph) {
	if p == nil {
		return
	}
	for _, t := range p.taps {
		if t.x.Valid() {
			gr.Expand(t.x)
		}
		gr.Expand(t.sum)
	}
}

// read adds the computed sums to the statistics.
func (p *imatrixPass) read() error {
	if p == nil || len(p.taps) == 0 {
		return nil
	}
	for _, t := range p.taps {
		v, err := t.sum.F32()
		if err != nil {
			return err
		}
		in := len(v) / 2
		if err := p.stats.add(t.name, v[:in], v[in:], t.rows); err != nil {
			return err
		}
		if t.x.Valid() {
			x, err := t.x.F32()
			if err != nil {
				return err
			}
			p.stats.mu.Lock()
			p.stats.captured = append(p.stats.captured, x)
			p.stats.mu.Unlock()
		}
	}
	p.stats.evaluated(p.unet)
	return nil
}
