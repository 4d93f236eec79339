package workpool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

func TestSize(t *testing.T) {
	for _, c := range []struct{ threads, n, want int }{
		{4, 10, 4}, {4, 2, 2}, {1, 10, 1}, {3, 0, 1}, {0, 1 << 20, runtime.NumCPU()}, {-1, 1, 1},
	} {
		if got := Size(c.threads, c.n); got != c.want {
			t.Errorf("Size(%d, %d) = %d, want %d", c.threads, c.n, got, c.want)
		}
	}
}

// Every index is visited once, by a worker number in range, whatever the
// thread count.
func TestEachVisitsEveryIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8, 0} {
		const n = 1000
		var seen [n]atomic.Int32
		workers := Size(threads, n)
		err := Each(context.Background(), n, threads, func(w, i int) error {
			if w < 0 || w >= workers {
				return fmt.Errorf("worker %d of %d", w, workers)
			}
			seen[i].Add(1)
			return nil
		})
		if err != nil {
			t.Fatalf("threads %d: %v", threads, err)
		}
		for i := range seen {
			if v := seen[i].Load(); v != 1 {
				t.Fatalf("threads %d: index %d visited %d times", threads, i, v)
			}
		}
	}
}

// One worker sees the indices in increasing order; several take them in
// increasing order (each worker's own sequence increases).
func TestEachOrder(t *testing.T) {
	var got []int
	Each(context.Background(), 50, 1, func(_, i int) error { got = append(got, i); return nil })
	if !slices.Equal(got, rangeOf(50)) {
		t.Errorf("one worker saw %v", got)
	}
	var mu sync.Mutex
	per := map[int][]int{}
	Each(context.Background(), 500, 4, func(w, i int) error {
		mu.Lock()
		per[w] = append(per[w], i)
		mu.Unlock()
		return nil
	})
	for w, seq := range per {
		if !slices.IsSorted(seq) {
			t.Errorf("worker %d took indices out of order: %v", w, seq)
		}
	}
}

// The error of the lowest failing index is returned, and no index is
// handed out after an error is seen.
func TestEachError(t *testing.T) {
	for _, threads := range []int{1, 4} {
		var calls atomic.Int32
		err := Each(context.Background(), 10000, threads, func(_, i int) error {
			calls.Add(1)
			if i == 7 || i == 9 {
				return fmt.Errorf("index %d failed", i)
			}
			return nil
		})
		if err == nil || err.Error() != "index 7 failed" {
			t.Errorf("threads %d: err = %v, want index 7's", threads, err)
		}
		// Workers already past the failure finish their call, no more.
		if n := calls.Load(); n > 10+int32(threads)*2 {
			t.Errorf("threads %d: %d calls after an error at index 7", threads, n)
		}
	}
}

// A cancelled context stops handing out indices, and Each returns the
// context's cause; a context cancelled after the last call spoils nothing.
func TestEachCancel(t *testing.T) {
	cause := errors.New("stop now")
	ctx, cancel := context.WithCancelCause(context.Background())
	var calls atomic.Int32
	err := Each(ctx, 1000, 2, func(_, i int) error {
		if calls.Add(1) == 5 {
			cancel(cause)
		}
		return nil
	})
	if !errors.Is(err, cause) {
		t.Errorf("err = %v, want the cause", err)
	}
	if n := calls.Load(); n > 8 {
		t.Errorf("%d calls after the cancellation at the fifth", n)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	err = Each(ctx2, 3, 1, func(_, i int) error {
		if i == 2 {
			cancel2()
		}
		return nil
	})
	if err != nil {
		t.Errorf("cancelled after the last index: %v", err)
	}
}

// Ranges covers [0, n) with contiguous ranges in order, k by k, and joins
// their errors in range order.
func TestRanges(t *testing.T) {
	for _, c := range []struct{ n, threads int }{{10, 3}, {7, 7}, {5, 9}, {1, 4}, {100, 1}} {
		var mu sync.Mutex
		got := map[int][2]int{}
		err := Ranges(c.n, c.threads, func(k, lo, hi int) error {
			mu.Lock()
			got[k] = [2]int{lo, hi}
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		w := Size(c.threads, c.n)
		if len(got) != w {
			t.Fatalf("n %d threads %d: %d ranges, want %d", c.n, c.threads, len(got), w)
		}
		at := 0
		for k := range w {
			r := got[k]
			if r[0] != at || r[1] <= r[0] {
				t.Fatalf("n %d threads %d: range %d is %v after %d", c.n, c.threads, k, r, at)
			}
			at = r[1]
		}
		if at != c.n {
			t.Errorf("n %d threads %d: ranges end at %d", c.n, c.threads, at)
		}
	}
	err := Ranges(9, 3, func(k, lo, hi int) error {
		if k == 0 || k == 2 {
			return fmt.Errorf("range %d", k)
		}
		return nil
	})
	if err == nil || err.Error() != "range 0\nrange 2" {
		t.Errorf("err = %q, want both ranges' errors in order", err)
	}
	if Ranges(0, 4, func(int, int, int) error { return errors.New("called") }) != nil {
		t.Error("an empty interval called f")
	}
}

func rangeOf(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
