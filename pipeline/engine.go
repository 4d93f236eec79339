package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"time"
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

// layout is the prepared plan: chunking parameters per output.
type layout struct {
	rows      []int64
	rowBytes  []int64
	perChunk  []int64 // rows per chunk
	total     int64
	chunkSize int64
	slots     int
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
// the same for any thread count. It is the engine of RunAll with one plan.
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
	_, err := runPlans(ctx, []*Plan{plan}, opts, false)
	return err
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
		// Whichever counted: the producer while it encoded (on its own), or the
		// engine in the bytes written (producers that do not count, and
		// outputs of a shared decode, whose encoders run apart from them).
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
