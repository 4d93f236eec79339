package pipeline

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"

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
	o := make([]Options, len(plans))
	layouts := make([]*layout, len(plans))
	tensors := make([][]formats.Tensor, len(plans))
	for i, p := range plans {
		o[i] = opts
		if err := o[i].normalise(p); err != nil {
			return nil, err
		}
		// By path, or through linked folders: two rungs must never race
		// for one file.
		for _, q := range plans[:i] {
			if SameTarget(p.Path, q.Path) {
				return nil, fmt.Errorf("%s: written by two plans (also as %s)", p.Path, q.Path)
			}
		}
		l, err := prepare(p, &o[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Path, err)
		}
		if tensors[i], err = p.Tensors(); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Path, err)
		}
		layouts[i] = l
		paths, _, err := p.Shards()
		if err != nil {
			return nil, err
		}
		for _, path := range paths {
			if err := CheckOutput(path, p.Inputs, opts.Force); err != nil {
				return nil, err
			}
		}
	}
	sched, err := schedule(plans, layouts)
	if err != nil {
		return nil, err
	}
	for _, g := range sched {
		g.bound(plans, o[0].ChunkBytes)
	}
	if ctx.Err() != nil {
		return nil, interrupted(plans[0].Path, ctx, "nothing written")
	}
	m := &multi{plans: plans, layouts: layouts, opts: o[0], sched: sched}
	var sinks []*sink
	abort := func(err error) ([]Written, error) {
		var first error
		for _, s := range sinks {
			if e := s.set.abort(ctx, err); first == nil {
				first = e
			}
		}
		if first == nil {
			return nil, err
		}
		return nil, first
	}
	for i, p := range plans {
		s, err := openSink(p, tensors[i], PublishOptions{Force: opts.Force, Inputs: p.Inputs, Logger: o[0].Logger})
		if err != nil {
			return abort(err)
		}
		sinks = append(sinks, s)
	}
	if err := m.execute(ctx, sinks); err != nil {
		return abort(err)
	}
	for i, p := range plans {
		written := make([]int64, len(p.Outputs))
		for k := range p.Outputs {
			written[k] = sinks[i].written[&p.Outputs[k]]
		}
		if err := checkDamage(p, written, &o[i]); err != nil {
			return abort(fmt.Errorf("%s: %w", p.Path, err))
		}
	}
	out := make([]Written, len(plans))
	for i, s := range sinks {
		w, err := s.finish(plans[i].Path)
		if err != nil {
			return abort(err)
		}
		out[i] = w
	}
	return commitSinks(plans, sinks, out)
}

// commitSinks publishes every plan's files in order. A commit that fails
// leaves the plans before it published, returns them, and names them in
// the error; the failing plan's shards and every later plan are removed.
func commitSinks(plans []*Plan, sinks []*sink, out []Written) ([]Written, error) {
	for i, s := range sinks {
		if err := s.set.commit(); err != nil {
			for _, t := range sinks[i+1:] {
				t.set.abort(context.Background(), err)
			}
			if i > 0 {
				// Complete files are not taken back; say which exist so
				// that a rerun (or a clean-up) knows.
				done := make([]string, i)
				for j := range done {
					done[j] = plans[j].Path
				}
				err = fmt.Errorf("%w (already published, complete: %s)", err, strings.Join(done, ", "))
			}
			return out[:i], err
		}
	}
	return out, nil
}

// checkLayout refuses a writer whose layout disagrees with the plan's sizes.
func checkLayout(lay, tensors []formats.Tensor) error {
	if len(lay) != len(tensors) {
		return fmt.Errorf("the writer lays out %d tensors, the plan has %d", len(lay), len(tensors))
	}
	for i := range lay {
		if lay[i].Size != tensors[i].Size || lay[i].Name != tensors[i].Name {
			return fmt.Errorf("tensor %q: the writer lays out %q with %d bytes, the plan has %d",
				tensors[i].Name, lay[i].Name, lay[i].Size, tensors[i].Size)
		}
	}
	return nil
}

// sink is one plan's output being written: one file, or the shards of a
// split GGUF, each with its digest.
type sink struct {
	// written counts the non-finite values of each output written.
	written map[*Output]int64
	set     *fileSet
	sums    []hash.Hash
	bws     []*bufio.Writer
	tws     []formats.TensorWriter // each file's format writer
	tw      formats.TensorWriter   // what the plan's data is written to
}

// openSink creates plan p's files (its shards when p.Split is active) and
// their writers; on failure nothing of it is left.
func openSink(p *Plan, tensors []formats.Tensor, o PublishOptions) (*sink, error) {
	paths, shards, err := p.Shards()
	if err != nil {
		return nil, err
	}
	set, err := createSet(paths, o)
	if err != nil {
		return nil, err
	}
	s := &sink{set: set, written: map[*Output]int64{}}
	if shards != nil && len(paths) > len(shards) {
		// The safetensors index: known now, written at once.
		idx, err := safetensorsIndex(paths, shards, tensors)
		if err == nil {
			_, err = set.files[len(shards)].Write(idx)
		}
		if err != nil {
			return nil, set.abort(context.Background(), fmt.Errorf("%s: %w", paths[len(shards)], err))
		}
	}
	ws := make([]io.Writer, max(len(shards), 1))
	for k := range ws {
		sum := sha256.New()
		bw := bufio.NewWriterSize(io.MultiWriter(set.files[k], sum), writeBufferBytes)
		s.sums, s.bws, ws[k] = append(s.sums, sum), append(s.bws, bw), bw
	}
	if shards == nil {
		s.tw, err = p.Format.New(ws[0], tensors, p.header())
		s.tws = []formats.TensorWriter{s.tw}
	} else {
		var sw *shardWriter
		sw, err = newShardWriter(p, paths, shards, ws, tensors)
		if err == nil {
			s.tw, s.tws = sw, sw.tws
		}
	}
	if err == nil {
		err = checkLayout(s.tw.Layout(), tensors)
	}
	if err != nil {
		return nil, set.abort(context.Background(), fmt.Errorf("%s: %w", p.Path, err))
	}
	return s, nil
}

// finish closes the writers, flushes and checks every file, and says what
// was written: for a split output, the first shard with the size of all
// and each shard in Shards.
func (s *sink) finish(path string) (Written, error) {
	if err := s.tw.Close(); err != nil {
		return Written{}, fmt.Errorf("%s: %w", path, err)
	}
	var w Written
	for k, bw := range s.bws {
		if err := bw.Flush(); err != nil {
			return Written{}, fmt.Errorf("%s: %w", s.set.paths[k], err)
		}
		if n, err := s.set.files[k].Size(); err == nil && n != s.tws[k].Size() {
			return Written{}, fmt.Errorf("%s: wrote %d bytes, the writer announced %d", s.set.paths[k], n, s.tws[k].Size())
		}
		one := Written{Path: s.set.paths[k], Bytes: s.tws[k].Size()}
		copy(one.SHA256[:], s.sums[k].Sum(nil))
		if k == 0 {
			w = one
		}
		if len(s.bws) > 1 {
			w.Shards = append(w.Shards, one)
		}
	}
	w.Bytes = s.tw.Size()
	return w, nil
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

// bound drops from the group's shared outputs those whose rows would make
// the common unit of decoded elements (a multiple of every shared output's
// row) larger than both a chunk and their own rows; they are produced on
// their own, so memory stays within the chunk budget.
func (g *group) bound(plans []*Plan, chunk int64) {
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

// multi is one RunAll in progress.
type multi struct {
	plans   []*Plan
	layouts []*layout
	opts    Options
	sched   []*group

	slots     int
	chunkSize int
	progress  sync.Mutex // guards done and orders the Progress calls
	done      int64
	total     int64
}

// job is one unit of work: a chunk of one output (prod set), or a range of
// a shared source's elements encoded into several outputs.
type job struct {
	prod    Producer
	first   int64
	n       int64
	src     *tensor.Source
	e0, ne  int64
	encs    []encode
	err     error
	done    chan struct{}
	refs    atomic.Int32
	tokens  int
	release func(*job)
	// calm reports that the job's decoded values were finite and below
	// checkAbove, so that no output encoded from them can hold a
	// non-finite value and drain need not count them.
	calm bool
}

// encode is one output's part of a shared job.
type encode struct {
	dec      Decoder
	dst      []byte
	firstRow int64
	nRows    int64
	name     string
}

// piece is one buffer a plan's writer writes: a job's output for it.
type piece struct {
	job  *job
	buf  []byte
	out  *Output
	rows int64
}

func (m *multi) execute(parent context.Context, sinks []*sink) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	chunk := m.opts.ChunkBytes
	m.chunkSize = int(chunk)
	single := max(1, min(m.opts.MaxMemory/chunk, int64(max(minSlots, slotsPerThread*m.opts.Threads))))
	m.slots = int(single) * len(m.plans)
	for _, l := range m.layouts {
		m.total += l.total
	}
	if m.opts.Progress != nil {
		m.opts.Progress(0, m.total)
	}
	sem := make(chan struct{}, m.slots)
	release := func(j *job) {
		for range j.tokens {
			<-sem
		}
	}
	jobs := make(chan *job)
	orders := make([]chan *piece, len(m.plans))
	for i := range orders {
		orders[i] = make(chan *piece, m.slots)
	}
	var wg sync.WaitGroup
	for range m.opts.Threads {
		wg.Go(func() { m.work(ctx, cancel, jobs) })
	}
	var complete bool
	wg.Go(func() {
		defer func() {
			close(jobs)
			for _, c := range orders {
				close(c)
			}
		}()
		complete = m.dispatch(ctx, sem, release, jobs, orders)
	})
	errs := make([]error, len(m.plans))
	var writers sync.WaitGroup
	for i := range m.plans {
		writers.Go(func() {
			errs[i] = m.drain(ctx, sinks[i], orders[i])
			if errs[i] != nil {
				cancel(errs[i])
				for range orders[i] {
					// Let the dispatcher finish after the cancellation.
				}
			}
		})
	}
	writers.Wait()
	err := errors.Join(firstErr(errs))
	if err == nil && !complete {
		err = context.Cause(ctx)
	}
	cancel(err)
	wg.Wait()
	if err == nil {
		return nil
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	return err
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			return e
		}
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// acquire reserves the slots that bytes of buffers take, at least one.
func (m *multi) acquire(ctx context.Context, sem chan struct{}, bytes int64) (int, bool) {
	n := int(min(int64(m.slots), max(1, (bytes+int64(m.chunkSize)-1)/int64(m.chunkSize))))
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			for range i {
				<-sem
			}
			return 0, false
		}
	}
	return n, true
}

// dispatch walks the groups in order and hands out the jobs, each plan's
// pieces in that plan's header order.
func (m *multi) dispatch(ctx context.Context, sem chan struct{}, release func(*job), jobs chan<- *job, orders []chan *piece) bool {
	send := func(pi int, p *piece) bool {
		select {
		case orders[pi] <- p:
			return true
		case <-ctx.Done():
			return false
		}
	}
	singles := func(pi, from, to int) bool {
		l := m.layouts[pi]
		for oi := from; oi < to; oi++ {
			out := &m.plans[pi].Outputs[oi]
			rows, rb, per := l.rows[oi], l.rowBytes[oi], l.perChunk[oi]
			if rows == 0 {
				j := &job{done: make(chan struct{}), release: release}
				j.refs.Store(1)
				close(j.done)
				if !send(pi, &piece{job: j, out: out}) {
					return false
				}
				continue
			}
			for first := int64(0); first < rows; first += per {
				n := min(per, rows-first)
				j := &job{prod: out.Producer, first: first, n: n, done: make(chan struct{}), release: release}
				var ok bool
				if j.tokens, ok = m.acquire(ctx, sem, n*rb); !ok {
					return false
				}
				j.refs.Store(1)
				buf := make([]byte, n*rb)
				j.encs = []encode{{dst: buf, name: out.Name}}
				if !send(pi, &piece{job: j, buf: buf, out: out, rows: n}) {
					return false
				}
				select {
				case jobs <- j:
				case <-ctx.Done():
					return false
				}
			}
		}
		return true
	}
	for _, g := range m.sched {
		for pi := range m.plans {
			r := g.runs[pi]
			end := r[1]
			if s := g.shared[pi]; s >= 0 {
				end = s
			}
			if !singles(pi, r[0], end) {
				return false
			}
		}
		if !m.shared(ctx, g, sem, release, jobs, send) {
			return false
		}
		for pi := range m.plans {
			if s := g.shared[pi]; s >= 0 {
				if !singles(pi, s+1, g.runs[pi][1]) {
					return false
				}
			}
		}
	}
	return true
}

// shared dispatches the jobs of a group's shared outputs: ranges of the
// source's elements that hold whole rows of every output, each decoded
// once and encoded into every plan's output.
func (m *multi) shared(ctx context.Context, g *group, sem chan struct{}, release func(*job), jobs chan<- *job,
	send func(int, *piece) bool) bool {
	if g.src == nil {
		return true
	}
	type part struct {
		pi       int
		out      *Output
		dec      Decoder
		rowElems int64
		rowBytes int64
	}
	var parts []part
	unit := int64(1)
	for pi, oi := range g.shared {
		if oi < 0 {
			continue
		}
		d := m.plans[pi].Outputs[oi].Producer.(Decoder)
		_, re := d.Decodes()
		parts = append(parts, part{pi: pi, out: &m.plans[pi].Outputs[oi], dec: d, rowElems: re, rowBytes: m.layouts[pi].rowBytes[oi]})
		unit = lcm(unit, re)
	}
	if len(parts) == 0 {
		return true
	}
	total := g.src.Elements()
	// The decoded values, their raw bytes and one copy per encoder fit a
	// chunk per worker, as Convert's scratch does for one output.
	per := max(unit, (int64(m.chunkSize)/(8+max(1, g.src.RawBytes(unit)/unit)))/unit*unit)
	for e0 := int64(0); e0 < total; e0 += per {
		ne := min(per, total-e0)
		j := &job{src: g.src, e0: e0, ne: ne, done: make(chan struct{}), release: release}
		var bytes int64
		for _, p := range parts {
			bytes += ne / p.rowElems * p.rowBytes
		}
		var ok bool
		if j.tokens, ok = m.acquire(ctx, sem, bytes); !ok {
			return false
		}
		j.refs.Store(int32(len(parts)))
		for _, p := range parts {
			first, n := e0/p.rowElems, ne/p.rowElems
			buf := make([]byte, n*p.rowBytes)
			j.encs = append(j.encs, encode{dec: p.dec, dst: buf, firstRow: first, nRows: n, name: p.out.Name})
		}
		for k, p := range parts {
			if !send(p.pi, &piece{job: j, buf: j.encs[k].dst, out: p.out, rows: j.encs[k].nRows}) {
				return false
			}
		}
		select {
		case jobs <- j:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// work runs jobs until jobs is closed; the first error cancels the run.
func (m *multi) work(ctx context.Context, cancel context.CancelCauseFunc, jobs <-chan *job) {
	var s tensor.Scratch
	for j := range jobs {
		if ctx.Err() == nil {
			j.err = m.run(ctx, j, &s)
			if j.err == nil {
				j.err = ctx.Err()
			}
			if j.err != nil {
				cancel(j.err)
			}
		} else {
			j.err = context.Cause(ctx)
		}
		close(j.done)
		s.Trim(int64(m.chunkSize))
	}
}

// run does one job, turning a producer's panic into an error.
func (m *multi) run(ctx context.Context, j *job, s *tensor.Scratch) (err error) {
	name := j.encs[0].name
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tensor %q: producer panicked: %v", name, r)
		}
	}()
	if j.prod != nil {
		if err := j.prod.Produce(ctx, j.encs[0].dst, j.first, j.n, s); err != nil {
			return nameTensor(name, err)
		}
		return nil
	}
	f := s.Float32s(0, int(j.ne))
	if err := j.src.Read(f, j.e0, s); err != nil {
		return nameTensor(j.src.Name, err)
	}
	j.calm = true
	for _, v := range f {
		if !(math.Abs(float64(v)) < checkAbove) { // NaN too
			j.calm = false
			break
		}
	}
	for k, e := range j.encs {
		vals := f
		if k < len(j.encs)-1 {
			// Encoders may overwrite their input: each but the last gets a copy.
			vals = s.Float32s(1, int(j.ne))
			copy(vals, f)
		}
		name = e.name
		if err := e.dec.Encode(e.dst, vals, e.firstRow, e.nRows); err != nil {
			return nameTensor(e.name, err)
		}
	}
	return nil
}

// drain writes one plan's pieces in order as their jobs complete.
func (m *multi) drain(ctx context.Context, s *sink, order <-chan *piece) error {
	var scratch tensor.Scratch // for counting a quantized piece's non-finite values
	for p := range order {
		select {
		case <-p.job.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if p.job.err != nil {
			return p.job.err
		}
		if len(p.buf) > 0 {
			if _, copied := p.out.Producer.(*copyProducer); !p.job.calm && (!copied || !p.out.Type.Quantized()) {
				s.written[p.out] += countNonFinite(p.out.Type, p.buf, &scratch)
			}
			n, err := s.tw.Write(p.buf)
			if err == nil && n != len(p.buf) {
				err = io.ErrShortWrite
			}
			if err != nil {
				return err
			}
			m.progress.Lock()
			m.done += int64(n)
			if m.opts.Progress != nil {
				m.opts.Progress(m.done, m.total)
			}
			m.progress.Unlock()
		}
		p.buf = nil
		if p.job.refs.Add(-1) == 0 {
			p.job.encs = nil
			p.job.release(p.job)
		}
	}
	return nil
}
