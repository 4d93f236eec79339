package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// Decoder is implemented by producers that read a source as float32 and
// encode the values (Convert's producer, ComfyUI scales), so that RunAll
// can decode each source once for every output made from it.
type Decoder interface {
	// Decodes returns the source the producer reads and the source
	// elements behind one row of its output; valid after Prepare.
	Decodes() (src *tensor.Source, rowElems int64)
	// Encode fills rows [firstRow, firstRow+nRows) of the output into dst
	// from their source values f (nRows*rowElems floats), which it may
	// overwrite.
	Encode(dst []byte, f []float32, firstRow, nRows int64) error
}

// Decodes returns the source and the elements of one output row.
func (p *convertProducer) Decodes() (*tensor.Source, int64) { return p.src, p.rowLen }

// Encode encodes the source values of rows [firstRow, firstRow+nRows).
func (p *convertProducer) Encode(dst []byte, f []float32, _, nRows int64) error {
	if p.rowLen == 0 {
		return fmt.Errorf("tensor %q: convert producer used before Prepare", p.src.Name)
	}
	if int64(len(f)) != nRows*p.rowLen {
		return fmt.Errorf("tensor %q: %d values for %d rows of %d", p.src.Name, len(f), nRows, p.rowLen)
	}
	if err := p.encode(dst, f, int(p.rowLen)); err != nil {
		return fmt.Errorf("encoding %s: %w", p.out, err)
	}
	return nil
}

// Written is one output of RunAll.
type Written struct {
	// Path is the output file (the first shard of a split output).
	Path string
	// Bytes is the file's size (of all shards for a split output).
	Bytes int64
	// SHA256 is the digest of the file's bytes, computed as they were written.
	SHA256 [sha256.Size]byte
	// Shards lists the shards of a split output (Path, Bytes and SHA256 are
	// then the first shard's path and digest and the size of all); nil
	// otherwise.
	Shards []Written
}

// RunAll writes several plans that read the same inputs in one pass: each
// source tensor that several outputs convert (a Decoder's source, matched
// by file and name) is decoded once per chunk and every output's encoder
// runs on those values, so a ladder of types reads and decodes its input
// once. Every plan's file is written as by Run (same bytes, header order,
// any thread count) through the atomic publish. Memory in flight stays
// within len(plans) times what Run holds for opts. Every output is
// checked, and every producer prepared, before any file is created; on any
// error or cancellation every partial file is removed. Outputs are
// committed one after another only when all are complete; a commit that
// fails leaves the ones before it published, returns them, and names them
// in the error.
//
// The plans must visit their sources in one common order (each plan's
// outputs from one source contiguous, sources in the same relative order
// in every plan), as plans made from one model by one planner do.
func RunAll(ctx context.Context, plans []*Plan, opts Options) ([]Written, error) {
	if len(plans) == 0 {
		return nil, errors.New("no plans")
	}
	return runPlans(ctx, plans, opts, true)
}

// runPlans is the one streaming engine behind Run and RunAll: it prepares
// every plan, opens their files (with digests when digest is set), streams
// the chunks, then finishes, checks and publishes every file.
func runPlans(ctx context.Context, plans []*Plan, opts Options, digest bool) ([]Written, error) {
	layouts, tensors, err := preparePlans(plans, &opts)
	if err != nil {
		return nil, err
	}
	sched, err := schedule(plans, layouts)
	if err != nil {
		return nil, err
	}
	for _, g := range sched {
		g.bound(plans, opts.ChunkBytes)
	}
	if ctx.Err() != nil {
		return nil, interrupted(plans[0].Path, ctx, "nothing written")
	}
	sinks := make([]*sink, 0, len(plans))
	for i, p := range plans {
		s, err := openSink(p, tensors[i], PublishOptions{Force: opts.Force, Inputs: p.Inputs, Logger: opts.Logger}, digest)
		if err != nil {
			return nil, abortSinks(ctx, sinks, err, -1)
		}
		sinks = append(sinks, s)
	}
	if err := newEngine(plans, layouts, opts, sched).execute(ctx, sinks); err != nil {
		return nil, abortSinks(ctx, sinks, err, 0)
	}
	out := make([]Written, len(plans))
	for i, p := range plans {
		w, err := sinks[i].finish()
		if err == nil {
			err = checkDamage(p, sinks[i].written, &opts)
		}
		if err == nil && opts.ReleaseInputs {
			err = p.Close()
		}
		if err != nil {
			return nil, abortSinks(ctx, sinks, err, i)
		}
		out[i] = w
	}
	return commitSinks(plans, sinks, out)
}

// preparePlans normalises opts, prepares every plan (see prepare) and
// checks every file it will write before any is created: two plans never
// write one file, and an existing output needs opts.Force.
func preparePlans(plans []*Plan, opts *Options) ([]*layout, [][]formats.Tensor, error) {
	layouts := make([]*layout, len(plans))
	tensors := make([][]formats.Tensor, len(plans))
	for i, p := range plans {
		if err := opts.normalise(p); err != nil {
			return nil, nil, err
		}
		// By path, or through linked folders: two rungs must never race
		// for one file.
		for _, q := range plans[:i] {
			if SameTarget(p.Path, q.Path) {
				return nil, nil, fmt.Errorf("%s: written by two plans (also as %s)", p.Path, q.Path)
			}
		}
		l, err := prepare(p, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.Path, err)
		}
		if tensors[i], err = p.Tensors(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.Path, err)
		}
		layouts[i] = l
		if len(plans) == 1 && !p.Split.Active() {
			continue // CreateAtomic checks the one file as it creates it
		}
		paths, _, err := p.Shards()
		if err != nil {
			return nil, nil, err
		}
		for _, path := range paths {
			if err := CheckOutput(path, p.Inputs, opts.Force); err != nil {
				return nil, nil, err
			}
		}
	}
	return layouts, tensors, nil
}

// group is one source's outputs across the plans: in each plan a
// contiguous run of outputs, of which at most one (shared) encodes the
// values the group decodes once.
type group struct {
	key    string
	src    *tensor.Source
	runs   [][2]int // per plan: outputs [from, to)
	shared []int    // per plan: index of its shared output, -1 for none
}

// sourceKey identifies a source across plans made from one model.
func sourceKey(file, name string) string { return file + "\x00" + name }

// schedule groups every plan's outputs by source and orders the groups so
// that each plan's outputs keep their header order.
func schedule(plans []*Plan, layouts []*layout) ([]*group, error) {
	if len(plans) == 1 {
		// Nothing to share: the plan's outputs in header order, in any
		// order of sources.
		g := &group{key: "\x00plan", runs: [][2]int{{0, len(plans[0].Outputs)}}, shared: []int{-1}}
		return []*group{g}, nil
	}
	byKey := map[string]*group{}
	var order []*group
	last := make([]int, len(plans)) // position in order of each plan's previous group
	for i := range last {
		last[i] = -1
	}
	for pi, p := range plans {
		var cur *group
		for oi := range p.Outputs {
			out := &p.Outputs[oi]
			key := ""
			var src *tensor.Source
			if d, ok := out.Producer.(Decoder); ok && layouts[pi].rows[oi] > 0 {
				src, _ = d.Decodes()
				key = sourceKey(src.Tensor.File, src.Name)
			} else if out.Source != nil {
				key = sourceKey(out.Source.File, out.Source.Name)
			}
			if key == "" || (cur != nil && key == cur.key) {
				if cur == nil {
					// An output before any source: a group of its own.
					cur = &group{key: fmt.Sprintf("\x00plan%d:%d", pi, oi)}
					cur.add(len(plans))
					order = append(order, cur)
					byKey[cur.key] = cur
				}
				if err := cur.extend(pi, oi, src, out); err != nil {
					return nil, fmt.Errorf("%s: %w", p.Path, err)
				}
				continue
			}
			g := byKey[key]
			if g == nil {
				g = &group{key: key}
				g.add(len(plans))
				// Insert right after this plan's previous group, so that
				// a source no earlier plan has keeps this plan's order.
				pos := len(order)
				if pi > 0 {
					pos = last[pi] + 1
				}
				order = append(order[:pos], append([]*group{g}, order[pos:]...)...)
				for j := range last {
					if last[j] >= pos {
						last[j]++
					}
				}
				byKey[key] = g
			}
			if g.runs[pi][1] > 0 {
				return nil, fmt.Errorf("%s: the outputs of tensor %q are not contiguous", p.Path, out.Name)
			}
			pos := indexOf(order, g)
			if pos <= last[pi] {
				return nil, fmt.Errorf("%s: tensor %q comes in another order than in %s", p.Path, out.Name, plans[0].Path)
			}
			last[pi] = pos
			g.runs[pi] = [2]int{oi, oi}
			cur = g
			if err := cur.extend(pi, oi, src, out); err != nil {
				return nil, fmt.Errorf("%s: %w", p.Path, err)
			}
		}
	}
	return order, nil
}

func indexOf(order []*group, g *group) int {
	for i, h := range order {
		if h == g {
			return i
		}
	}
	return -1
}

func (g *group) add(plans int) {
	g.runs = make([][2]int, plans)
	g.shared = make([]int, plans)
	for i := range g.shared {
		g.shared[i] = -1
	}
}

// extend adds output oi of plan pi to the group; src is set when the
// output's producer is a Decoder of the group's source.
func (g *group) extend(pi, oi int, src *tensor.Source, out *Output) error {
	r := &g.runs[pi]
	if r[1] == 0 && r[0] == 0 {
		r[0] = oi
	}
	if r[1] != 0 && r[1] != oi {
		return fmt.Errorf("the outputs of tensor %q are not contiguous", out.Name)
	}
	r[1] = oi + 1
	if src != nil && g.shared[pi] < 0 && sourceKey(src.Tensor.File, src.Name) == g.key {
		g.shared[pi] = oi
		if g.src == nil {
			g.src = src
		}
	}
	return nil
}

// bound drops the group's shared output when it is the only one, and
// drops from the group's shared outputs those whose rows would make
// the common unit of decoded elements (a multiple of every shared output's
// row) larger than both a chunk and their own rows; they are produced on
// their own, so memory stays within the chunk budget.
func (g *group) bound(plans []*Plan, chunk int64) {
	n := 0
	for _, oi := range g.shared {
		if oi >= 0 {
			n++
		}
	}
	if n < 2 {
		// One output gains nothing from a shared decode: it runs its own
		// producer, which counts its own damage.
		g.src = nil
		for i := range g.shared {
			g.shared[i] = -1
		}
		return
	}
	unit := int64(1)
	for pi, oi := range g.shared {
		if oi < 0 {
			continue
		}
		_, re := plans[pi].Outputs[oi].Producer.(Decoder).Decodes()
		u := lcm(unit, re)
		if u > max(unit, re) && 8*u > chunk {
			g.shared[pi] = -1
			continue
		}
		unit = u
	}
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}
