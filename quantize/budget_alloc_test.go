package quantize

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bruteForce returns the least error of any assignment within budget (and
// its cost), trying every combination.
func bruteForce(items []allocItem, budget int64) (float64, int64, bool) {
	best, bestCost, found := math.Inf(1), int64(0), false
	choice := make([]int, len(items))
	var walk func(i int, cost int64, e float64)
	walk = func(i int, cost int64, e float64) {
		if cost > budget {
			return
		}
		if i == len(items) {
			if e < best || e == best && cost < bestCost {
				best, bestCost, found = e, cost, true
			}
			return
		}
		for c := range items[i].Cost {
			choice[i] = c
			walk(i+1, cost+items[i].Cost[c], e+items[i].Err[c])
		}
	}
	walk(0, 0, 0)
	return best, bestCost, found
}

// randomItems makes n items with 2-5 candidates each: costs and errors at
// random, so that hulls have dominated and non-convex points.
func randomItems(r *rand.Rand, n int) []allocItem {
	items := make([]allocItem, n)
	for i := range items {
		m := 2 + r.IntN(4)
		for range m {
			items[i].Cost = append(items[i].Cost, int64(1+r.IntN(40)))
			items[i].Err = append(items[i].Err, float64(r.IntN(1000))/10)
		}
	}
	return items
}

// TestAllocateOptimalAtBreakpoints compares the allocator with brute force
// on random small problems at every budget: it always fits; where it
// reports a breakpoint its error is the brute-force optimum; elsewhere it
// is never worse than the best breakpoint that fits and never better than
// the optimum.
func TestAllocateOptimalAtBreakpoints(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	breakpoints, exact := 0, 0
	for trial := range 300 {
		items := randomItems(r, 2+r.IntN(3))
		var minCost, maxCost int64
		for _, it := range items {
			lo, hi := it.Cost[0], it.Cost[0]
			for _, c := range it.Cost {
				lo, hi = min(lo, c), max(hi, c)
			}
			minCost += lo
			maxCost += hi
		}
		if _, err := allocate(items, minCost-1); err == nil {
			t.Fatalf("trial %d: budget %d below the cheapest %d accepted", trial, minCost-1, minCost)
		}
		bestBreak := math.Inf(1)
		for budget := minCost; budget <= maxCost+1; budget++ {
			a, err := allocate(items, budget)
			if err != nil {
				t.Fatalf("trial %d budget %d: %v", trial, budget, err)
			}
			var cost int64
			var e float64
			for i, c := range a.Choice {
				cost += items[i].Cost[c]
				e += items[i].Err[c]
			}
			if cost != a.Bytes || math.Abs(e-a.Err) > 1e-9 || cost > budget {
				t.Fatalf("trial %d budget %d: choice %v costs %d (reported %d), error %g (reported %g)", trial, budget, a.Choice, cost, a.Bytes, e, a.Err)
			}
			opt, _, _ := bruteForce(items, budget)
			if e < opt-1e-9 {
				t.Fatalf("trial %d budget %d: error %g below the optimum %g", trial, budget, e, opt)
			}
			if a.Breakpoint {
				breakpoints++
				// Optimal for every budget of at least its own cost.
				if o, _, _ := bruteForce(items, a.Bytes); math.Abs(o-e) > 1e-9 {
					t.Fatalf("trial %d budget %d: breakpoint choice %v has error %g, optimum for %d bytes is %g", trial, budget, a.Choice, e, a.Bytes, o)
				}
				bestBreak = min(bestBreak, e)
			}
			if e > bestBreak+1e-9 {
				t.Fatalf("trial %d budget %d: error %g worse than a breakpoint %g found at a smaller budget", trial, budget, e, bestBreak)
			}
			if math.Abs(e-opt) <= 1e-9 {
				exact++
			}
		}
	}
	if breakpoints == 0 {
		t.Fatal("no breakpoint seen: the test checks nothing")
	}
	t.Logf("%d breakpoint answers; %d answers equal to the brute-force optimum", breakpoints, exact)
}

// TestAllocateCrafted checks hand-made cases whose answers are known.
func TestAllocateCrafted(t *testing.T) {
	// Two tensors, types at 2, 4 and 8 bytes: tensor 0's error falls fast,
	// tensor 1's slowly, so the bytes go to tensor 0 first.
	items := []allocItem{
		{Cost: []int64{2, 4, 8}, Err: []float64{100, 10, 1}},
		{Cost: []int64{2, 4, 8}, Err: []float64{10, 8, 7}},
	}
	for _, c := range []struct {
		budget int64
		want   []int
	}{
		{4, []int{0, 0}},
		{6, []int{1, 0}},
		{8, []int{1, 1}},  // 10+8: 8+2 would leave 1+10 but costs 10
		{10, []int{2, 0}}, // 1+10=11 beats 10+8=18
		{12, []int{2, 1}},
		{16, []int{2, 2}},
		{100, []int{2, 2}},
	} {
		a, err := allocate(items, c.budget)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.want {
			if a.Choice[i] != c.want[i] {
				t.Errorf("budget %d: choice %v, want %v", c.budget, a.Choice, c.want)
				break
			}
		}
	}
	// A dominated candidate (costs more, errs more) is never chosen, and a
	// non-convex middle point is chosen only when it is what fits.
	it := allocItem{Cost: []int64{1, 5, 6, 10}, Err: []float64{50, 60, 45, 0}}
	if h := it.hull(); len(h) != 2 || h[0] != 0 || h[1] != 3 {
		t.Errorf("hull %v, want [0 3] (5 is dominated, 6 lies above the chord)", h)
	}
	if a, _ := allocate([]allocItem{it}, 7); a.Choice[0] != 2 {
		t.Errorf("budget 7: choice %v, want the non-hull point 2 from the fill", a.Choice)
	}
}

// TestAllocateDeterministic shuffles nothing but checks ties: equal slopes
// resolve by item order, the same every run.
func TestAllocateDeterministic(t *testing.T) {
	items := make([]allocItem, 6)
	for i := range items {
		items[i] = allocItem{Cost: []int64{1, 2}, Err: []float64{2, 1}}
	}
	a, _ := allocate(items, 9)
	want := []int{1, 1, 1, 0, 0, 0}
	for i := range want {
		if a.Choice[i] != want[i] {
			t.Fatalf("choice %v, want %v", a.Choice, want)
		}
	}
}
