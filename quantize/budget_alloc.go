package quantize

import (
	"fmt"
	"sort"
)

// allocItem is one tensor as the allocator sees it: for each candidate
// type, the bytes it costs and the error it leaves.
type allocItem struct {
	Cost []int64
	Err  []float64
}

// hull returns the candidates of it on the lower convex hull of (cost,
// error), cheapest first: each step to the next point costs more bytes and
// removes error, and the error removed per byte falls from step to step.
// Candidates that cost more and do no better are dropped; ties keep the
// lower index, so the hull depends only on the numbers.
func (it allocItem) hull() []int {
	idx := make([]int, len(it.Cost))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ia, ib := idx[a], idx[b]
		if it.Cost[ia] != it.Cost[ib] {
			return it.Cost[ia] < it.Cost[ib]
		}
		return it.Err[ia] < it.Err[ib]
	})
	var h []int
	for _, i := range idx {
		if len(h) > 0 && it.Err[i] >= it.Err[h[len(h)-1]] {
			continue // costs at least as much and removes nothing
		}
		if len(h) > 0 && it.Cost[i] == it.Cost[h[len(h)-1]] {
			continue // same cost: the one sorted first has less error
		}
		// Drop the last point while it lies on or above the segment from
		// the one before it to i (cross product in float64).
		for len(h) >= 2 {
			a, b := h[len(h)-2], h[len(h)-1]
			ab := (it.Err[a] - it.Err[b]) / float64(it.Cost[b]-it.Cost[a])
			ai := (it.Err[a] - it.Err[i]) / float64(it.Cost[i]-it.Cost[a])
			if ab > ai {
				break
			}
			h = h[:len(h)-1]
		}
		h = append(h, i)
	}
	return h
}

// allocation is the allocator's answer: the candidate chosen per item, the
// bytes and the error of the choice.
type allocation struct {
	Choice []int
	Bytes  int64
	Err    float64
	// Breakpoint reports that the greedy took every step in order of error
	// removed per byte up to its stopping point and skipped none: the
	// choice then minimises error + λ·bytes for some λ ≥ 0, so no
	// assignment of at most Bytes bytes has less error.
	Breakpoint bool
}

// allocate chooses one candidate per item so that the summed cost stays
// within budget and the summed error is least, greedily: every item starts
// at its cheapest hull point, then hull steps are taken in order of error
// removed per byte (ties: item order, then step order) while they fit; a
// step that does not fit ends its item's climb. Finally each item in turn
// takes the best single change (any candidate, hull or not) that fits the
// bytes left, until none helps. The answer depends only on the numbers.
func allocate(items []allocItem, budget int64) (allocation, error) {
	type step struct {
		item, to int // hull position reached
		slope    float64
	}
	hulls := make([][]int, len(items))
	pos := make([]int, len(items))
	var total int64
	var steps []step
	for i, it := range items {
		if len(it.Cost) == 0 || len(it.Cost) != len(it.Err) {
			return allocation{}, fmt.Errorf("item %d: %d costs and %d errors", i, len(it.Cost), len(it.Err))
		}
		h := it.hull()
		hulls[i] = h
		total += it.Cost[h[0]]
		for k := 1; k < len(h); k++ {
			steps = append(steps, step{item: i, to: k, slope: (it.Err[h[k-1]] - it.Err[h[k]]) / float64(it.Cost[h[k]]-it.Cost[h[k-1]])})
		}
	}
	if total > budget {
		return allocation{}, fmt.Errorf("the cheapest candidates need %d bytes, more than the %d available", total, budget)
	}
	sort.SliceStable(steps, func(a, b int) bool {
		if steps[a].slope != steps[b].slope {
			return steps[a].slope > steps[b].slope
		}
		if steps[a].item != steps[b].item {
			return steps[a].item < steps[b].item
		}
		return steps[a].to < steps[b].to
	})
	blocked := make([]bool, len(items))
	skipped, prefix := false, true
	for _, s := range steps {
		if blocked[s.item] || pos[s.item] != s.to-1 {
			continue
		}
		it, h := items[s.item], hulls[s.item]
		d := it.Cost[h[s.to]] - it.Cost[h[s.to-1]]
		if total+d > budget {
			blocked[s.item] = true
			skipped = true
			continue
		}
		if skipped {
			// A step taken after a skipped one: the steps taken are no
			// longer a prefix of the order, so the guarantee is lost.
			prefix = false
		}
		total += d
		pos[s.item] = s.to
	}
	choice := make([]int, len(items))
	for i := range items {
		choice[i] = hulls[i][pos[i]]
	}
	breakpoint := prefix
	// Fill: spend what is left on the best single change per item.
	for changed := true; changed; {
		changed = false
		for i, it := range items {
			cur := choice[i]
			best, gain := cur, 0.0
			for c := range it.Cost {
				if total-it.Cost[cur]+it.Cost[c] > budget {
					continue
				}
				if g := it.Err[cur] - it.Err[c]; g > gain {
					best, gain = c, g
				}
			}
			if best != cur {
				total += it.Cost[best] - it.Cost[cur]
				choice[i] = best
				changed, breakpoint = true, false
			}
		}
	}
	var e float64
	for i, it := range items {
		e += it.Err[choice[i]]
	}
	return allocation{Choice: choice, Bytes: total, Err: e, Breakpoint: breakpoint}, nil
}
