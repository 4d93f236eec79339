// Package workpool is the one worker pool of the engine packages: Each
// hands out indices to a fixed number of goroutines, Ranges splits an
// interval into contiguous parts, one a goroutine. Both wait for every
// goroutine they start before returning.
package workpool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// Size resolves a worker count for n units of work: threads below 1 means
// runtime.NumCPU(), and never more workers than units, at least one.
func Size(threads, n int) int {
	if threads < 1 {
		threads = runtime.NumCPU()
	}
	return max(1, min(threads, n))
}

// Each calls f(w, i) for every i in [0, n) on Size(threads, n) goroutines;
// w in [0, workers) names the goroutine, so that callers can keep state
// per worker (scratch buffers). Indices are handed out in increasing
// order. After the first error, or once ctx is done, no further index is
// handed out; Each waits for the calls under way and returns the error of
// the lowest index that failed, else context.Cause(ctx) when indices were
// left undone because ctx was done, else nil.
func Each(ctx context.Context, n, threads int, f func(w, i int) error) error {
	if n <= 0 {
		return nil
	}
	r := &run{n: n, failed: n}
	var wg sync.WaitGroup
	for w := range Size(threads, n) {
		wg.Go(func() { r.work(ctx, w, f) })
	}
	wg.Wait()
	if r.err != nil {
		return r.err
	}
	if r.cancelled.Load() && r.done.Load() < int64(n) {
		return context.Cause(ctx)
	}
	return nil
}

// run is one Each in progress.
type run struct {
	n         int
	next      atomic.Int64 // the next index to hand out
	done      atomic.Int64 // calls that returned nil
	stop      atomic.Bool  // an error or ctx: hand out no more
	cancelled atomic.Bool
	mu        sync.Mutex // guards failed and err
	failed    int        // the lowest index that failed so far
	err       error
}

// work is one worker's loop: take the next index and call f until none is
// left or the run stops.
func (r *run) work(ctx context.Context, w int, f func(w, i int) error) {
	for !r.stop.Load() {
		if ctx.Err() != nil {
			r.cancelled.Store(true)
			r.stop.Store(true)
			return
		}
		i := int(r.next.Add(1) - 1)
		if i >= r.n {
			return
		}
		if err := f(w, i); err != nil {
			r.mu.Lock()
			if i < r.failed {
				r.failed, r.err = i, err
			}
			r.mu.Unlock()
			r.stop.Store(true)
			continue
		}
		r.done.Add(1)
	}
}

// Ranges splits [0, n) into Size(threads, n) contiguous ranges, range k
// being [n*k/w, n*(k+1)/w), calls f(k, lo, hi) for each on a goroutine of
// its own (the last on the caller's), and returns the ranges' errors
// joined in range order. With one range f runs on the caller's goroutine
// alone.
func Ranges(n, threads int, f func(k, lo, hi int) error) error {
	if n <= 0 {
		return nil
	}
	w := Size(threads, n)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for k := range w - 1 {
		wg.Go(func() { errs[k] = f(k, n*k/w, n*(k+1)/w) })
	}
	errs[w-1] = f(w-1, n*(w-1)/w, n)
	wg.Wait()
	return errors.Join(errs...)
}
