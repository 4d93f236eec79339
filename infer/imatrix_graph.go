package infer

import (
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/native"
)

// imatrixPass is the collection state of one graph: the products it
// watches and, after compute, their per-column sums to read back.
// Activations are measured in groups of up to native.MaxColumnSquares by
// one op each (fewer graph nodes, so fewer of ggml's per-node thread
// barriers); a group holds its activations only until its last one exists.
type imatrixPass struct {
	stats   *ImatrixStats
	names   map[native.Tensor]imatWeight // collected weights
	taps    []imatrixTap
	groups  []native.Tensor // [ΣK, 3] column squares, counts and maxima per group
	pending []native.Tensor // activations of the group being filled
	c       *native.Context // the graph's context (set by watch)
	net     bool
}

// imatWeight names a collected weight.
type imatWeight struct {
	file string // the name in the model file (the entry name)
	net  bool
}

// imatrixTap is one watched product W·x.
type imatrixTap struct {
	name   string
	x      native.Tensor
	group  int   // index in groups
	offset int64 // of x's columns in the group's output
	rows   int64
	keep   native.Tensor // a copy of x, only for the test capture
}

// SetImatrix turns imatrix collection on for every later generation of m
// (the diffusion network and the text encoders; see ImatrixStats), accumulating into s;
// nil turns it off.
func (m *Model) SetImatrix(s *ImatrixStats) {
	m.imat = s
	if s == nil || m.imatNames != nil {
		return
	}
	m.imatNames = map[native.Tensor]imatWeight{}
	names := imatrixEntryNames(m.Specs)
	for i, sp := range m.Specs {
		// sd.cpp collects only model weights (model., cond_stage_model.,
		// text_encoders.), never the VAE (first_stage_model.).
		diffusion := strings.HasPrefix(sp.Name, DmPrefix)
		if !diffusion && !strings.HasPrefix(sp.Name, "cond_stage_model.") && !strings.HasPrefix(sp.Name, "text_encoders.") {
			continue
		}
		if len(sp.Shape) != 2 {
			continue
		}
		if t, ok := m.Weights.get(sp.Name); ok {
			m.imatNames[t] = imatWeight{file: names[i], net: diffusion}
		}
	}
}

// imatrixEntryNames names each weight's imatrix entry as in its model file.
// Names that two component files share (the "text_model." names of a
// standalone CLIP-L and CLIP-G) get sd-cli's load prefix of their component
// ("clip_g.text_model....") so that the entries stay apart.
func imatrixEntryNames(specs []WeightSpec) []string {
	count := map[string]int{}
	for _, sp := range specs {
		count[sp.Src.Name]++
	}
	out := make([]string, len(specs))
	for i, sp := range specs {
		out[i] = sp.Src.Name
		if count[sp.Src.Name] > 1 {
			if ct := family.InputByFlag(sp.Component); ct != nil {
				out[i] = ct.LoadName(sp.Src.Name)
			}
		}
	}
	return out
}

// imatrixPass returns the collection state for a new graph, nil when off.
func (m *Model) imatrixPass() *imatrixPass {
	if m.imat == nil {
		return nil
	}
	return &imatrixPass{stats: m.imat, names: m.imatNames}
}

// Watch records the product w·x when w is a collected weight: the graph
// also computes Σx² per input column. Products that share an activation
// (q, k and v) share its measurement.
func (g *Builder) Watch(w, x native.Tensor) {
	p := g.imat
	if p == nil {
		return
	}
	iw, ok := p.names[w]
	if !ok {
		return
	}
	p.c = g.Ctx
	ne := x.Ne()
	tap := imatrixTap{name: iw.file, x: x, rows: ne[1] * ne[2] * ne[3], group: -1}
	for _, t := range p.taps {
		if t.x == x {
			tap.group, tap.offset = t.group, t.offset
			break
		}
	}
	if tap.group < 0 {
		if len(p.pending) == native.MaxColumnSquares {
			p.flush()
		}
		tap.group = len(p.groups)
		for _, y := range p.pending {
			tap.offset += y.Ne()[0]
		}
		p.pending = append(p.pending, x)
	}
	if iw.file == p.stats.CaptureName {
		tap.keep = g.Ctx.Cont(x).SetOutput()
	}
	p.net = p.net || iw.net
	p.taps = append(p.taps, tap)
}

// flush closes the group being filled.
func (p *imatrixPass) flush() {
	if len(p.pending) == 0 {
		return
	}
	p.groups = append(p.groups, p.c.ColumnSquares(p.pending...).SetOutput())
	p.pending = p.pending[:0]
}

// expand closes the last group and adds the groups to gr ahead of the main
// output, so that each is scheduled right after its activations exist and
// their memory is reused as usual rather than held to the end.
func (p *imatrixPass) expand(gr *native.Graph) {
	if p == nil {
		return
	}
	p.flush()
	for _, t := range p.taps {
		if t.keep.Valid() {
			gr.Expand(t.keep)
		}
	}
	for _, gt := range p.groups {
		gr.Expand(gt)
	}
}

// read adds the computed sums to the statistics.
func (p *imatrixPass) read() error {
	if p == nil || len(p.taps) == 0 {
		return nil
	}
	vals := make([][]float32, len(p.groups))
	for i, gt := range p.groups {
		v, err := gt.F32()
		if err != nil {
			return err
		}
		vals[i] = v
	}
	for _, t := range p.taps {
		v := vals[t.group]
		total, k := int64(len(v)/3), t.x.Ne()[0]
		col := func(row int64) []float32 { return v[row*total+t.offset : row*total+t.offset+k] }
		if err := p.stats.Add(t.name, col(0), col(1), col(2), t.rows); err != nil {
			return err
		}
		if t.keep.Valid() {
			x, err := t.keep.F32()
			if err != nil {
				return err
			}
			p.stats.mu.Lock()
			p.stats.Captured = append(p.stats.Captured, x)
			p.stats.mu.Unlock()
		}
	}
	p.stats.evaluated(p.net)
	return nil
}
