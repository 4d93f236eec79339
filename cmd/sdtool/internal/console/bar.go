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
	mu  sync.Mutex
	bar *progressbar.ProgressBar // nil when silent
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

// newBar renders at most once per throttle (zero in tests, to see every update).
func newBar(w io.Writer, description string, total int64, throttle time.Duration) *Bar {
	// progressbar divides by its maximum; an empty output still gets a bar.
	return &Bar{bar: progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(description),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(throttle),
		progressbar.OptionFullWidth(),
		progressbar.OptionSetRenderBlankState(true),
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
	_ = b.bar.Set64(done) // rendering errors must not fail the conversion
}

// Finish completes the bar (a no-op when silent).
func (b *Bar) Finish() {
	if b.bar == nil {
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

// Steps shows a step counter ("generate 3/20 step") on w while work runs,
// when w is a terminal; it returns the function to report each step with
// (nil when silent) and the function that ends the bar.
func Steps(w io.Writer, label string, total int) (update func(step, steps int), finish func()) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, func() {}
	}
	bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(), progressbar.OptionSetItsString("step"), progressbar.OptionShowIts(),
		progressbar.OptionClearOnFinish())
	return func(step, steps int) {
			bar.ChangeMax(steps)
			bar.Set(step)
		}, func() {
			bar.Finish()
		}
}
