package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// engine is one run of the streaming engine over one or more plans: a
// dispatcher cuts the outputs into jobs in header order and reserves
// budget for each, workers run them, and one drain per plan writes that
// plan's pieces in order as their jobs complete.
type engine struct {
	plans   []*Plan
	layouts []*layout
	opts    Options
	sched   []*group

	slots     int
	chunkSize int64
	sem       chan struct{} // one token per slot of the budget in flight
	pool      chan []byte   // chunk buffers for reuse
	progress  sync.Mutex    // guards done and orders the Progress calls
	done      int64
	total     int64
}

// job is one unit of work: rows of one output (prod set), or a range of a
// shared source's elements decoded once and encoded into several outputs.
type job struct {
	prod   Producer
	src    *tensor.Source
	e0, ne int64
	encs   []encode
	err    error
	done   chan struct{}
	refs   atomic.Int32
	tokens int
}

// encode is one output's part of a job.
type encode struct {
	dec      Decoder // for a shared job
	out      *Output
	dst      []byte
	firstRow int64
	nRows    int64
	// nonFinite counts the NaN and infinite values written when the
	// output's producer does not count its own Damage.
	nonFinite int64
}

// piece is one buffer a plan's writer writes: a job's encode for it, or
// (job nil) a run of empty outputs, complete when cut.
type piece struct {
	job    *job
	enc    int
	index  int  // the output's index in its plan
	empty  int  // for a run of empty outputs: how many, from index on
	last   bool // the output's last piece
	pooled bool // the buffer came from the pool of chunk buffers
}

// newEngine sizes the budget: the slots one plan would hold, per plan.
func newEngine(plans []*Plan, layouts []*layout, opts Options, sched []*group) *engine {
	e := &engine{plans: plans, layouts: layouts, opts: opts, sched: sched, chunkSize: opts.ChunkBytes}
	single := max(1, min(opts.MaxMemory/e.chunkSize, int64(max(minSlots, slotsPerThread*opts.Threads))))
	e.slots = int(single) * len(plans)
	e.sem = make(chan struct{}, e.slots)
	e.pool = make(chan []byte, e.slots)
	for _, l := range layouts {
		e.total += l.total
	}
	return e
}

// execute streams one plan into tw, the engine without files (the fuzz
// target's way in); l is the plan's prepared layout.
func execute(ctx context.Context, plan *Plan, l *layout, o *Options, tw formats.TensorWriter) error {
	plans := []*Plan{plan}
	sched, err := schedule(plans, []*layout{l})
	if err != nil {
		return err
	}
	s := &sink{tw: tw, written: make([]int64, len(plan.Outputs))}
	return newEngine(plans, []*layout{l}, *o, sched).execute(ctx, []*sink{s})
}

// execute runs the workers, the dispatcher and a drain per plan into
// sinks; the first error cancels the rest. A cancellation that arrives
// after the last piece was written does not spoil complete outputs.
func (e *engine) execute(parent context.Context, sinks []*sink) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	if e.opts.Progress != nil {
		e.opts.Progress(0, e.total)
	}
	jobs := make(chan *job)
	orders := make([]chan *piece, len(e.plans))
	for i := range orders {
		orders[i] = make(chan *piece, e.slots)
	}
	var wg sync.WaitGroup
	for range e.opts.Threads {
		wg.Go(func() { e.work(ctx, cancel, jobs) })
	}
	var complete bool
	wg.Go(func() {
		defer func() {
			close(jobs)
			for _, c := range orders {
				close(c)
			}
		}()
		complete = e.dispatch(ctx, jobs, orders)
	})
	errs := make([]error, len(e.plans))
	var writers sync.WaitGroup
	for i := range e.plans {
		writers.Go(func() {
			errs[i] = e.drain(ctx, i, sinks[i], orders[i])
			if errs[i] != nil {
				cancel(errs[i])
				for range orders[i] {
					// Let the dispatcher finish after the cancellation.
				}
			}
		})
	}
	writers.Wait()
	err := firstErr(errs)
	if err == nil && !complete {
		// The orders were closed early: the dispatcher saw the cancellation.
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

// firstErr returns the first error that is not a cancellation (the cause
// of the others), else the first error.
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

// acquire reserves the slots that bytes of buffers take: at least one, and
// for a chunk larger than a slot (one row over the chunk size) as many as
// it covers, up to the whole budget.
func (e *engine) acquire(ctx context.Context, bytes int64) (int, bool) {
	n := int(min(int64(e.slots), max(1, (bytes+e.chunkSize-1)/e.chunkSize)))
	for i := range n {
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			for range i {
				<-e.sem
			}
			return 0, false
		}
	}
	return n, true
}

// release returns a job's slots once every piece of it is written.
func (e *engine) release(j *job) {
	for range j.tokens {
		<-e.sem
	}
}

// buffer returns a buffer of size bytes: a pooled chunk buffer when it
// fits one, so that memory is reused rather than faulted in anew.
func (e *engine) buffer(size int64) ([]byte, bool) {
	if size > e.chunkSize {
		return make([]byte, size), false
	}
	select {
	case b := <-e.pool:
		return b[:size], true
	default:
		return make([]byte, e.chunkSize)[:size], true
	}
}

// dispatcher hands out one run's jobs, each plan's pieces in that plan's
// header order.
type dispatcher struct {
	*engine
	ctx    context.Context
	jobs   chan<- *job
	orders []chan *piece
}

// dispatch walks the groups in order and hands out their jobs: each plan's
// outputs before the group's shared one, the shared decode, then the rest.
// It reports whether every job was handed out.
func (e *engine) dispatch(ctx context.Context, jobs chan<- *job, orders []chan *piece) bool {
	d := &dispatcher{engine: e, ctx: ctx, jobs: jobs, orders: orders}
	for _, g := range e.sched {
		for pi := range e.plans {
			r := g.runs[pi]
			end := r[1]
			if s := g.shared[pi]; s >= 0 {
				end = s
			}
			if !d.singles(pi, r[0], end) {
				return false
			}
		}
		if !d.shared(g) {
			return false
		}
		for pi := range e.plans {
			if s := g.shared[pi]; s >= 0 && !d.singles(pi, s+1, g.runs[pi][1]) {
				return false
			}
		}
	}
	return true
}

// send queues a piece on plan pi's writer.
func (d *dispatcher) send(pi int, p *piece) bool {
	select {
	case d.orders[pi] <- p:
		return true
	case <-d.ctx.Done():
		return false
	}
}

// give hands a job to the workers.
func (d *dispatcher) give(j *job) bool {
	select {
	case d.jobs <- j:
		return true
	case <-d.ctx.Done():
		return false
	}
}

// singles dispatches outputs [from, to) of plan pi, each by its own
// producer in row chunks. A run of empty outputs is one piece, complete
// when cut: a header of many empty tensors makes no job per tensor.
func (d *dispatcher) singles(pi, from, to int) bool {
	l := d.layouts[pi]
	for oi := from; oi < to; oi++ {
		out := &d.plans[pi].Outputs[oi]
		rows, rb, per := l.rows[oi], l.rowBytes[oi], l.perChunk[oi]
		if rows == 0 {
			p := &piece{index: oi, last: true, empty: 1}
			for oi+1 < to && l.rows[oi+1] == 0 {
				oi++
				p.empty++
			}
			if !d.send(pi, p) {
				return false
			}
			continue
		}
		for first := int64(0); first < rows; first += per {
			n := min(per, rows-first)
			j := &job{prod: out.Producer, done: make(chan struct{})}
			var ok bool
			if j.tokens, ok = d.acquire(d.ctx, n*rb); !ok {
				return false
			}
			j.refs.Store(1)
			buf, pooled := d.buffer(n * rb)
			j.encs = []encode{{out: out, dst: buf, firstRow: first, nRows: n}}
			if !d.send(pi, &piece{job: j, index: oi, last: first+n == rows, pooled: pooled}) || !d.give(j) {
				return false
			}
		}
	}
	return true
}

// sharedPart is one plan's output of a group's shared decode.
type sharedPart struct {
	pi, oi   int
	dec      Decoder
	rowElems int64
	rowBytes int64
}

// shared dispatches the jobs of a group's shared outputs: ranges of the
// source's elements that hold whole rows of every output, each decoded
// once and encoded into every plan's output.
func (d *dispatcher) shared(g *group) bool {
	if g.src == nil {
		return true
	}
	var parts []sharedPart
	unit := int64(1)
	for pi, oi := range g.shared {
		if oi < 0 {
			continue
		}
		dec := d.plans[pi].Outputs[oi].Producer.(Decoder)
		_, re := dec.Decodes()
		parts = append(parts, sharedPart{pi: pi, oi: oi, dec: dec, rowElems: re, rowBytes: d.layouts[pi].rowBytes[oi]})
		unit = lcm(unit, re)
	}
	if len(parts) == 0 {
		return true
	}
	total := g.src.Elements()
	// The decoded values, their raw bytes and one copy per encoder fit a
	// chunk per worker, as Convert's scratch does for one output.
	per := max(unit, (d.chunkSize/(8+max(1, g.src.RawBytes(unit)/unit)))/unit*unit)
	for e0 := int64(0); e0 < total; e0 += per {
		ne := min(per, total-e0)
		j := &job{src: g.src, e0: e0, ne: ne, done: make(chan struct{})}
		var bytes int64
		for _, p := range parts {
			bytes += ne / p.rowElems * p.rowBytes
		}
		var ok bool
		if j.tokens, ok = d.acquire(d.ctx, bytes); !ok {
			return false
		}
		j.refs.Store(int32(len(parts)))
		for _, p := range parts {
			first, n := e0/p.rowElems, ne/p.rowElems
			out := &d.plans[p.pi].Outputs[p.oi]
			j.encs = append(j.encs, encode{dec: p.dec, out: out, dst: make([]byte, n*p.rowBytes), firstRow: first, nRows: n})
		}
		for k, p := range parts {
			if !d.send(p.pi, &piece{job: j, enc: k, index: p.oi, last: e0+ne == total}) {
				return false
			}
		}
		if !d.give(j) {
			return false
		}
	}
	return true
}

// work runs jobs until jobs is closed; the first error cancels the run.
func (e *engine) work(ctx context.Context, cancel context.CancelCauseFunc, jobs <-chan *job) {
	var s tensor.Scratch
	for j := range jobs {
		if ctx.Err() == nil {
			j.err = runJob(ctx, j, &s)
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
		// Drop the scratch an oversized row grew, so that memory falls back to the budget.
		s.Trim(e.chunkSize)
	}
}

// runJob does one job, turning a producer's panic (a codec bug on an
// unexpected shape) into an error, so that the partial outputs are still
// removed and the process exits cleanly.
func runJob(ctx context.Context, j *job, s *tensor.Scratch) (err error) {
	cur := &j.encs[0]
	defer func() {
		if r := recover(); r != nil {
			err = nameTensor(cur.out.Name, fmt.Errorf("rows [%d, %d): producer panicked: %v", cur.firstRow, cur.firstRow+cur.nRows, r))
		}
	}()
	if j.prod != nil {
		if err := j.prod.Produce(ctx, cur.dst, cur.firstRow, cur.nRows, s); err != nil {
			return nameTensor(cur.out.Name, err)
		}
		if scans(cur.out) {
			cur.nonFinite = countNonFinite(cur.out.Type, cur.dst, s)
		}
		return nil
	}
	f := s.Float32s(0, int(j.ne))
	if err := j.src.Read(f, j.e0, s); err != nil {
		return nameTensor(j.src.Name, err)
	}
	// Values all finite and below checkAbove cannot encode to a
	// non-finite value: then no output needs counting.
	calm := true
	for _, v := range f {
		if !(math.Abs(float64(v)) < checkAbove) { // NaN too
			calm = false
			break
		}
	}
	for k := range j.encs {
		cur = &j.encs[k]
		vals := f
		if k < len(j.encs)-1 {
			// Encoders may overwrite their input: each but the last gets a copy.
			vals = s.Float32s(1, int(j.ne))
			copy(vals, f)
		}
		if err := cur.dec.Encode(cur.dst, vals, cur.firstRow, cur.nRows); err != nil {
			return nameTensor(cur.out.Name, err)
		}
	}
	if !calm {
		// Only now: counting decodes block types in scratch slot 0, which
		// holds the source values until the last encoder ran.
		for k := range j.encs {
			j.encs[k].nonFinite = countNonFinite(j.encs[k].out.Type, j.encs[k].dst, s)
		}
	}
	return nil
}

// drain writes plan pi's pieces in order into s as their jobs complete.
func (e *engine) drain(ctx context.Context, pi int, s *sink, order <-chan *piece) error {
	plan, l := e.plans[pi], e.layouts[pi]
	start := time.Now()
	for p := range order {
		if p.job != nil {
			if err := e.write(ctx, s, p); err != nil {
				return err
			}
		}
		if p.last {
			for i := p.index; i < p.index+max(p.empty, 1); i++ {
				logTensor(e.opts.Logger, &plan.Outputs[i], l.rows[i]*l.rowBytes[i], time.Since(start))
				start = time.Now()
			}
		}
	}
	return nil
}

// write waits for a piece's job, writes its bytes, reports progress and
// gives back its buffer and, with the job's last piece, its slots.
func (e *engine) write(ctx context.Context, s *sink, p *piece) error {
	select {
	case <-p.job.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if p.job.err != nil {
		return p.job.err
	}
	enc := &p.job.encs[p.enc]
	s.written[p.index] += enc.nonFinite
	if len(enc.dst) > 0 {
		n, err := s.tw.Write(enc.dst)
		if err == nil && n != len(enc.dst) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return err
		}
		e.progress.Lock()
		e.done += int64(n)
		if e.opts.Progress != nil {
			e.opts.Progress(e.done, e.total)
		}
		e.progress.Unlock()
	}
	if p.pooled {
		// Never more pooled buffers exist than slots, so this does not
		// drop any; the default only guards that invariant.
		select {
		case e.pool <- enc.dst[:cap(enc.dst)]:
		default:
		}
	}
	enc.dst = nil
	if p.job.refs.Add(-1) == 0 {
		e.release(p.job)
	}
	return nil
}
