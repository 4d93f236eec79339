package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// Defaults of Options.
const (
	// DefaultMaxMemory is the default budget of chunk buffers in flight.
	DefaultMaxMemory = 1 << 30
	// DefaultChunkBytes is the default largest chunk (output plus producer
	// scratch); smaller budgets get smaller chunks (an eighth of the budget).
	DefaultChunkBytes = 4 << 20
	// minChunkBytes keeps chunks from becoming so small that per-chunk
	// overhead dominates, unless the budget itself is smaller.
	minChunkBytes = 64 << 10
	// writeBufferBytes buffers the writer's small header and padding writes;
	// chunks larger than this go to the file directly.
	writeBufferBytes = 1 << 20
	// slotsPerThread chunks in flight per worker keep every worker busy
	// while the writer waits for a slow chunk; more would only add memory
	// (each fresh buffer costs page faults) without adding speed.
	slotsPerThread = 4
	minSlots       = 8
)

// Options configures Run.
type Options struct {
	// Threads is the number of producer workers; 0 means runtime.NumCPU().
	Threads int
	// MaxMemory bounds the bytes of chunk buffers in flight; 0 means DefaultMaxMemory.
	// Each worker's scratch buffers (at most one chunk's worth) come on top.
	// The engine keeps no more than a few chunks per thread in flight, so
	// a large budget is an upper bound, not a target.
	MaxMemory int64
	// ChunkBytes is the largest chunk (output bytes plus the producer's scratch);
	// 0 picks min(DefaultChunkBytes, MaxMemory/8), at least 64 KiB. A row
	// larger than a chunk makes a chunk of its own.
	ChunkBytes int64
	// Force allows replacing an existing output (never an input).
	Force bool
	// Progress, when set, is called with the data bytes written so far and the total.
	Progress func(done, total int64)
	// Logger receives per-tensor Debug records and warnings; nil discards them.
	Logger *slog.Logger
	// StrictValues refuses (removes) the output when encoding met NaN or
	// infinite inputs or turned finite values non-finite; without it each
	// such tensor gets a warning with its counts.
	StrictValues bool
	// ReleaseInputs closes the plan's models (Plan.Close) once the last
	// byte is written, before the rename: for an output that replaces its
	// input (meta --in-place), as Windows renames over no open file.
	ReleaseInputs bool
}

// chunk is one unit of work: rows [first, first+n) of one output.
type chunk struct {
	out    *Output
	index  int // output index
	first  int64
	n      int64
	last   bool // last chunk of its output
	empty  int  // for a chunk of empty outputs: how many, from index on
	buf    []byte
	pooled bool // buf came from the pool of chunkBytes buffers
	tokens int  // budget slots held
	// nonFinite counts the NaN and infinite values the chunk holds when its
	// producer does not count its own Damage.
	nonFinite int64
	err       error
	done      chan struct{}
}

// layout is the prepared plan: chunking parameters per output.
type layout struct {
	rows      []int64
	rowBytes  []int64
	perChunk  []int64 // rows per chunk
	total     int64
	chunkSize int64
	slots     int
	// written sums the chunks' nonFinite per output.
	written []int64
}

func (o *Options) normalise(plan *Plan) error {
	if plan.Path == "" {
		return errors.New("no output path")
	}
	if plan.Format.New == nil {
		return fmt.Errorf("%s: no output format", plan.Path)
	}
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.MaxMemory <= 0 {
		o.MaxMemory = DefaultMaxMemory
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = min(int64(DefaultChunkBytes), max(o.MaxMemory/8, minChunkBytes))
	}
	o.ChunkBytes = min(o.ChunkBytes, o.MaxMemory)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// prepare validates the plan, lets producers check their outputs and sizes
// the chunks. Chunk sizes depend on the budget, not on the thread count.
func prepare(plan *Plan, o *Options) (*layout, error) {
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	l := &layout{
		rows:      make([]int64, len(plan.Outputs)),
		written:   make([]int64, len(plan.Outputs)),
		rowBytes:  make([]int64, len(plan.Outputs)),
		perChunk:  make([]int64, len(plan.Outputs)),
		chunkSize: o.ChunkBytes,
		slots:     int(max(1, min(o.MaxMemory/o.ChunkBytes, int64(max(minSlots, slotsPerThread*o.Threads))))),
	}
	var errs []error
	for i := range plan.Outputs {
		out := &plan.Outputs[i]
		rows, rb, err := out.Rows()
		if err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %v", out.Name, err))
			continue
		}
		if rb > math.MaxInt {
			errs = append(errs, fmt.Errorf("tensor %q: a row of %d bytes is too large for this platform", out.Name, rb))
			continue
		}
		var scratch int64
		if rows > 0 {
			if p, ok := out.Producer.(Preparer); ok {
				if scratch, err = p.Prepare(out); err != nil {
					errs = append(errs, nameTensor(out.Name, err))
					continue
				}
			}
		}
		l.rows[i], l.rowBytes[i] = rows, rb
		l.perChunk[i] = max(1, o.ChunkBytes/max(1, rb+scratch))
		l.total += rows * rb
	}
	return l, errors.Join(errs...)
}

// Run writes the plan's outputs to plan.Path in plan.Format: producers run
// on opts.Threads workers, at most opts.MaxMemory of chunks are in flight,
// and a single writer writes the chunks in header order, so the output is
// the same for any thread count.
//
// The plan and every producer's Prepare are checked before anything is
// created. The file is written through the atomic publish (CreateAtomic):
// Path+".partial", created exclusively, fsynced and renamed over Path when
// complete. Path is refused when it exists without opts.Force, and always
// when it or its .partial is one of plan.Inputs. On any error or
// cancellation the partial file is removed and the error, prefixed with
// Path, says what happened: it wraps ErrInterrupted (and the context's
// cause) when ctx was cancelled, and says "no space left on device" when
// the disk is full.
func Run(ctx context.Context, plan *Plan, opts Options) error {
	if err := opts.normalise(plan); err != nil {
		return err
	}
	out := plan.Path
	l, err := prepare(plan, &opts)
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	tensors, err := plan.Tensors()
	if err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	if ctx.Err() != nil {
		return interrupted(out, ctx, "nothing written")
	}
	if plan.Split.Active() {
		return runSplit(ctx, plan, tensors, l, &opts)
	}
	a, err := CreateAtomic(out, PublishOptions{Force: opts.Force, Inputs: plan.Inputs, Logger: opts.Logger})
	if err != nil {
		return err
	}
	if err := write(ctx, a, plan, tensors, l, &opts); err != nil {
		return a.Abort(ctx, err)
	}
	if err := checkDamage(plan, l.written, &opts); err != nil {
		return a.Abort(ctx, err)
	}
	if opts.ReleaseInputs {
		if err := plan.Close(); err != nil {
			return a.Abort(ctx, err)
		}
	}
	return a.Commit()
}

// checkDamage warns about the NaN and infinite values of the outputs: the
// ones a converting producer met in its inputs and the finite values its
// encoding turned non-finite (q8_0 makes +-3e38 all Inf, one Inf makes its
// block NaN), and, for every other producer (merges, LoRA bakes and
// extractions, copies), the non-finite values it wrote (written, per
// output). The first tensors are named, one line each, then one line for
// the rest; with StrictValues they are an error naming the first tensors.
func checkDamage(plan *Plan, written []int64, o *Options) error {
	var bad []string
	for i := range plan.Outputs {
		out := &plan.Outputs[i]
		// Whichever counted: the producer while it encoded (Run), or the
		// engine in the bytes written (producers that do not count, and
		// every output of a ladder, whose encoders run apart from them).
		var dm Damage
		if d, ok := out.Producer.(Damaged); ok {
			dm = d.Damage()
		}
		if dm == (Damage{}) && i < len(written) {
			dm.Written = written[i]
		}
		if dm == (Damage{}) {
			continue
		}
		var what string
		if dm.Written > 0 {
			what = fmt.Sprintf("%d non-finite values written", dm.Written)
		} else {
			what = fmt.Sprintf("%d non-finite inputs, %d finite values made non-finite", dm.NonFinite, dm.Spoiled)
		}
		if len(bad) < maxDamageLines {
			o.Logger.Warn("non-finite values", "tensor", out.Name, "type", out.Type.String(),
				"non_finite_inputs", dm.NonFinite, "finite_made_non_finite", dm.Spoiled, "non_finite_written", dm.Written)
		}
		bad = append(bad, fmt.Sprintf("%q (%s)", out.Name, what))
	}
	if len(bad) > maxDamageLines {
		o.Logger.Warn("non-finite values in more tensors", "tensors", len(bad)-maxDamageLines)
	}
	if len(bad) == 0 || !o.StrictValues {
		return nil
	}
	more := ""
	if len(bad) > 3 {
		more = fmt.Sprintf(" and %d more", len(bad)-3)
		bad = bad[:3]
	}
	return fmt.Errorf("refused for non-finite values in tensor %s%s", strings.Join(bad, ", tensor "), more)
}

// maxDamageLines is how many tensors checkDamage warns about one line
// each; the rest get one line, so that a model full of NaN does not print
// a line per tensor.
const maxDamageLines = 5

// write streams the plan into f through the format writer and checks the
// resulting size; it does not close f.
func write(ctx context.Context, f *AtomicFile, plan *Plan, tensors []formats.Tensor, l *layout, o *Options) error {
	bw := bufio.NewWriterSize(f, writeBufferBytes)
	tw, err := plan.Format.New(bw, tensors, plan.header())
	if err != nil {
		return err
	}
	// The chunks are cut from the plan's sizes, so a writer that disagrees
	// about any tensor would misplace every byte after it.
	// A writer that gives its layout a tensor at a time is checked without
	// a copy of every descriptor.
	var n int
	var at func(int) formats.Tensor
	if tl, ok := tw.(formats.TensorLayout); ok {
		n, at = tl.NumTensors(), tl.TensorAt
	} else {
		lay := tw.Layout()
		n, at = len(lay), func(i int) formats.Tensor { return lay[i] }
	}
	if n != len(tensors) {
		return fmt.Errorf("the writer lays out %d tensors, the plan has %d", n, len(tensors))
	}
	for i := range n {
		if t := at(i); t.Size != tensors[i].Size || t.Name != tensors[i].Name {
			return fmt.Errorf("tensor %q: the writer lays out %q with %d bytes, the plan has %d",
				tensors[i].Name, t.Name, t.Size, tensors[i].Size)
		}
	}
	if err := execute(ctx, plan, l, o, tw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if n, err := f.Size(); err == nil && n != tw.Size() {
		return fmt.Errorf("wrote %d bytes, the writer announced %d", n, tw.Size())
	}
	return nil
}

// execute runs the worker pool and writes every chunk in order to tw.
func execute(parent context.Context, plan *Plan, l *layout, o *Options, tw formats.TensorWriter) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)

	sem := make(chan struct{}, l.slots)
	pool := make(chan []byte, l.slots)
	jobs := make(chan *chunk)
	order := make(chan *chunk, l.slots)

	var wg sync.WaitGroup
	for range o.Threads {
		wg.Go(func() { work(ctx, cancel, jobs, l.chunkSize) })
	}
	var complete bool
	wg.Go(func() {
		defer close(order)
		defer close(jobs)
		complete = dispatch(ctx, plan, l, sem, pool, jobs, order)
	})
	err := drain(ctx, plan, l, o, tw, sem, pool, order)
	if err == nil && !complete {
		// order was closed early: the dispatcher saw the cancellation.
		err = context.Cause(ctx)
	}
	cancel(err)
	wg.Wait()
	if err == nil {
		// A cancellation that arrives after the last chunk was written does not spoil a complete output.
		return nil
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	return err
}

// dispatch cuts the outputs into chunks in header order, reserves budget and
// a buffer for each and hands them to the writer and, in the same order, to
// the workers. It reports whether every chunk was handed out.
func dispatch(ctx context.Context, plan *Plan, l *layout, sem chan struct{}, pool chan []byte, jobs, order chan<- *chunk) bool {
	for i := 0; i < len(plan.Outputs); i++ {
		out := &plan.Outputs[i]
		rows, rb, per := l.rows[i], l.rowBytes[i], l.perChunk[i]
		if rows == 0 {
			// A run of empty outputs is one chunk, complete when cut: a
			// header of many empty tensors makes no chunk per tensor.
			c := &chunk{out: out, index: i, last: true, empty: 1, done: closedChan}
			for i+1 < len(plan.Outputs) && l.rows[i+1] == 0 {
				i++
				c.empty++
			}
			select {
			case order <- c:
			case <-ctx.Done():
				return false
			}
			continue
		}
		for first := int64(0); first < rows; first += per {
			n := min(per, rows-first)
			size := n * rb
			c := &chunk{out: out, index: i, first: first, n: n, last: first+n == rows, done: make(chan struct{})}
			// A chunk larger than a slot (one row over the chunk size) takes
			// as many slots as it covers, up to the whole budget.
			c.tokens = int(min(int64(l.slots), (size+l.chunkSize-1)/l.chunkSize))
			for range c.tokens {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return false
				}
			}
			if size <= l.chunkSize {
				select {
				case c.buf = <-pool:
				default:
					c.buf = make([]byte, l.chunkSize)
				}
				c.buf, c.pooled = c.buf[:size], true
			} else {
				c.buf = make([]byte, size)
			}
			select {
			case order <- c:
			case <-ctx.Done():
				return false
			}
			select {
			case jobs <- c:
			case <-ctx.Done():
				return false
			}
		}
	}
	return true
}

// closedChan is the done channel of every empty output's chunk, which is
// complete when cut: one channel, not one per tensor of a header of many
// empty tensors.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// work runs producers for chunks until jobs is closed; the first error
// cancels the whole run.
func work(ctx context.Context, cancel context.CancelCauseFunc, jobs <-chan *chunk, chunkSize int64) {
	var s tensor.Scratch
	for c := range jobs {
		if ctx.Err() == nil {
			c.err = produce(ctx, c, &s)
			if c.err == nil && scans(c.out) {
				c.nonFinite = countNonFinite(c.out.Type, c.buf, &s)
			}
			if c.err == nil {
				c.err = ctx.Err()
			}
			if c.err != nil {
				c.err = nameTensor(c.out.Name, c.err)
				cancel(c.err)
			}
		} else {
			c.err = context.Cause(ctx)
		}
		close(c.done)
		if !c.pooled {
			// Drop the scratch an oversized row grew, so that memory falls back to the budget.
			s.Trim(chunkSize)
		}
	}
}

// produce runs the chunk's producer, turning a panic (a codec bug on an
// unexpected shape) into an error so that the partial output is still
// removed and the process exits cleanly.
func produce(ctx context.Context, c *chunk, s *tensor.Scratch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rows [%d, %d): producer panicked: %v", c.first, c.first+c.n, r)
		}
	}()
	return c.out.Producer.Produce(ctx, c.buf, c.first, c.n, s)
}

// drain writes the chunks in order as they complete.
func drain(ctx context.Context, plan *Plan, l *layout, o *Options, tw formats.TensorWriter,
	sem chan struct{}, pool chan []byte, order <-chan *chunk) error {
	var done int64
	if o.Progress != nil {
		o.Progress(0, l.total)
	}
	start := time.Now()
	for c := range order {
		select {
		case <-c.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if c.err != nil {
			return c.err
		}
		l.written[c.index] += c.nonFinite
		if len(c.buf) > 0 {
			n, err := tw.Write(c.buf)
			if err == nil && n != len(c.buf) {
				err = io.ErrShortWrite
			}
			if err != nil {
				return err
			}
			done += int64(n)
		}
		if c.pooled {
			// Never more pooled buffers exist than slots, so this does not
			// drop any; the default only guards that invariant.
			select {
			case pool <- c.buf[:cap(c.buf)]:
			default:
			}
		}
		c.buf = nil
		for range c.tokens {
			<-sem
		}
		if o.Progress != nil && c.n > 0 {
			o.Progress(done, l.total)
		}
		if c.last {
			for i := c.index; i < c.index+max(c.empty, 1); i++ {
				logTensor(o.Logger, &plan.Outputs[i], l.rows[i]*l.rowBytes[i], time.Since(start))
				start = time.Now()
			}
		}
	}
	return nil
}

func logTensor(log *slog.Logger, o *Output, bytes int64, d time.Duration) {
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{"tensor", o.Name, "type", o.Type.String(), "shape", o.Shape, "bytes", bytes, "elapsed", d.Round(time.Microsecond)}
	if o.Source != nil {
		attrs = append(attrs, "source", o.Source.Name, "source_type", o.Source.Type.String())
	}
	log.Debug("wrote tensor", attrs...)
}
