package console

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar is a byte progress bar (bytes, rate and ETA) fed by
// pipeline.Options.Progress; it renders only on a terminal.
type Bar struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar // nil when silent
	known bool                     // a total has been given
}

// New returns a bar of total bytes on stderr labelled description, or a
// silent bar when stderr is not a terminal.
func New(description string, total int64) *Bar {
	return NewTo(os.Stderr, term.IsTerminal(int(os.Stderr.Fd())), description, total)
}

// NewTo returns a bar of total bytes that renders on w when enabled is true
// and is silent otherwise.
func NewTo(w io.Writer, enabled bool, description string, total int64) *Bar {
	if !enabled {
		return &Bar{}
	}
	return newBar(w, description, total, 100*time.Millisecond)
}

// barWidth is the bar's width where the terminal's is unknown or too
// narrow for a full-width bar (progressbar would draw an empty one).
const barWidth = 40

// columns returns the width of the terminal w writes to, or 0 when it is
// not one or does not say.
func columns(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}

// widthOption makes the bar full width on a terminal wide enough for it,
// else barWidth wide.
func widthOption(w io.Writer) progressbar.Option {
	if columns(w) >= 2*barWidth {
		return progressbar.OptionFullWidth()
	}
	return progressbar.OptionSetWidth(barWidth)
}

// newBar renders at most once per throttle (zero in tests, to see every
// update). Sizes are in binary units (MiB), as the summaries print them. A
// bar whose total is not known yet draws nothing until the first Update
// brings it, instead of a first frame of "0/1 B".
func newBar(w io.Writer, description string, total int64, throttle time.Duration) *Bar {
	// progressbar divides by its maximum; an empty output still gets a bar.
	return &Bar{known: total > 0, bar: progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(description),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(throttle),
		widthOption(w),
		progressbar.OptionSetRenderBlankState(total > 0),
		progressbar.OptionOnCompletion(func() { io.WriteString(w, "\n") }),
	)}
}

// Enabled reports whether the bar renders anything.
func (b *Bar) Enabled() bool { return b.bar != nil }

// Update records done of total bytes; it has the signature of
// pipeline.Options.Progress.
func (b *Bar) Update(done, total int64) {
	if b.bar == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if total > 0 && b.bar.GetMax64() != total {
		b.bar.ChangeMax64(total)
	}
	if total > 0 {
		b.known = true
	}
	if !b.known {
		return // nothing to show against a total of nothing
	}
	_ = b.bar.Set64(done) // rendering errors must not fail the conversion
}

// Finish completes the bar (a no-op when silent or never drawn).
func (b *Bar) Finish() {
	if b.bar == nil || !b.known {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.bar.Finish()
}

// Abandon leaves the bar where it stopped, ending the line, after an error.
func (b *Bar) Abandon() {
	if b.bar == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.bar.Exit()
}

// Steps shows a step counter ("generate 3/20") with the elapsed time and
// an estimate of what is left on w while work runs, when w is a terminal;
// it returns the function to report each step with (nil when silent) and
// the function that ends the bar.
func Steps(w io.Writer, label string, total int) (update func(step, steps int), finish func()) {
	f, ok := w.(*os.File)
	return stepsTo(w, ok && term.IsTerminal(int(f.Fd())), label, total)
}

// stepsTo is Steps rendering on w when enabled. It draws nothing before the
// first step, whose time gives the first estimate (a rate over no steps
// read "0 step/hr").
func stepsTo(w io.Writer, enabled bool, label string, total int) (update func(step, steps int), finish func()) {
	if !enabled {
		return nil, func() {}
	}
	bar := progressbar.NewOptions(max(total, 1), progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
		widthOption(w), progressbar.OptionThrottle(0), progressbar.OptionClearOnFinish())
	return func(step, steps int) {
			bar.ChangeMax(steps)
			bar.Set(step)
		}, func() {
			bar.Finish()
		}
}
