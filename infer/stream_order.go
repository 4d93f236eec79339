package infer

import (
	"container/heap"
	"slices"

	"github.com/sdtool/sdtool/native"
)

// The order of a graph's nodes when weights stream (stream.go): block
// after block, so that each streamed block's weights are read by one run
// of nodes. Any order in which nodes follow their inputs computes the same
// values; ggml's own order follows the first operands depth-first, which
// can put a block's side chains (its projection of the text context) at
// the start of the graph, far from the block.

// reorder puts every node as late as its consumers allow: from each
// output, the deepest operand is computed first, so that a side chain
// (a block's projection of the text context, its modulation from the
// timestep vector) runs just before the node that takes it, inside its
// block, rather than at the start of the graph where ggml's order from
// the graph's first operands may put it. Groups read only off the main
// chain (the timestep and class embeddings every block takes) go first
// instead. The values are the same in any order; a block's weights are
// then read by one run of nodes.
func (p *pager) reorder(gr *native.Graph) error {
	inputs := gr.NodeInputs()
	n := len(inputs)
	if n == 0 {
		return nil
	}
	depth := make([]int, n)
	consumed := make([]bool, n)
	for i, in := range inputs {
		for _, j := range in {
			depth[i] = max(depth[i], depth[j]+1)
			consumed[j] = true
		}
	}
	order := make([]int, 0, n)
	done := make([]bool, n)
	var visit func(i int)
	visit = func(i int) {
		done[i] = true
		in := slices.Clone(inputs[i])
		slices.SortStableFunc(in, func(a, b int) int { return depth[b] - depth[a] })
		for _, j := range in {
			if !done[j] {
				visit(j)
			}
		}
		order = append(order, i)
	}
	for i := range n {
		if !consumed[i] && !done[i] {
			visit(i)
		}
	}
	blocks := p.blockOrder(inputs, order, depth, consumed)
	if len(blocks) != n {
		// Operands that are not a DAG (a graph writing state in place,
		// such as a video VAE's caches): ggml's own order stands.
		return nil
	}
	return gr.Reorder(blocks)
}

// blockOrder lists the nodes so that each group's nodes run before the next
// group's start, where their inputs allow: a node takes the rank of the
// group it reads (groups ranked by first use in alap, the side groups
// first), a node reading none the least rank of its consumers, and among
// the nodes whose inputs are computed the least rank runs first, ties in
// alap's order. (A DiT block carrying two streams, image and text: by depth alone the
// next block's image stream would start before this block's text stream
// ends.)
func (p *pager) blockOrder(inputs [][]int, alap, depth []int, consumed []bool) []int {
	n := len(inputs)
	consumers := make([][]int, n)
	for i, in := range inputs {
		for _, j := range in {
			consumers[j] = append(consumers[j], i)
		}
	}
	pos := make([]int, n)
	for k, i := range alap {
		pos[i] = k
	}
	waiting := make([]int, n)
	ready := &nodeHeap{rank: p.ranks(inputs, consumers, alap, depth, consumed), pos: pos}
	for i, in := range inputs {
		waiting[i] = len(in)
		if waiting[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]int, 0, n)
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, i)
		for _, c := range consumers[i] {
			if waiting[c]--; waiting[c] == 0 {
				heap.Push(ready, c)
			}
		}
	}
	return order
}

// ranks gives each node the rank blockOrder sorts by.
func (p *pager) ranks(inputs, consumers [][]int, alap, depth []int, consumed []bool) []int {
	n := len(inputs)
	reads := make([][]int, n)
	for _, u := range p.Uses {
		reads[u.node] = append(reads[u.node], u.Group)
	}
	side := p.sideGroups(inputs, depth, consumed, reads)
	groupRank := map[int]int{}
	for _, i := range alap {
		for _, g := range reads[i] {
			if _, ok := groupRank[g]; !ok {
				groupRank[g] = len(groupRank)
				if side[g] {
					groupRank[g] = -1
				}
			}
		}
	}
	rank := make([]int, n)
	for k := n - 1; k >= 0; k-- {
		i := alap[k]
		rank[i] = len(groupRank)
		if len(reads[i]) > 0 {
			rank[i] = groupRank[reads[i][0]]
			for _, g := range reads[i] {
				rank[i] = min(rank[i], groupRank[g])
			}
			continue
		}
		for _, c := range consumers[i] {
			rank[i] = min(rank[i], rank[c])
		}
	}
	return rank
}

// nodeHeap orders ready nodes by rank, then by position.
type nodeHeap struct {
	nodes     []int
	rank, pos []int
}

func (h *nodeHeap) Len() int { return len(h.nodes) }
func (h *nodeHeap) Less(a, b int) bool {
	x, y := h.nodes[a], h.nodes[b]
	if h.rank[x] != h.rank[y] {
		return h.rank[x] < h.rank[y]
	}
	return h.pos[x] < h.pos[y]
}
func (h *nodeHeap) Swap(a, b int) { h.nodes[a], h.nodes[b] = h.nodes[b], h.nodes[a] }
func (h *nodeHeap) Push(x any)    { h.nodes = append(h.nodes, x.(int)) }
func (h *nodeHeap) Pop() any {
	x := h.nodes[len(h.nodes)-1]
	h.nodes = h.nodes[:len(h.nodes)-1]
	return x
}

// sideGroups returns the groups none of whose nodes depends on the main
// chain: the nodes downstream of the bottom of the graph's longest path
// (the latent's input, or a text encoder's token embedding).
func (p *pager) sideGroups(inputs [][]int, depth []int, consumed []bool, reads [][]int) map[int]bool {
	n := len(inputs)
	bottom := -1
	for i := range n {
		if !consumed[i] && (bottom < 0 || depth[i] > depth[bottom]) {
			bottom = i
		}
	}
	// At most n steps: a walk down operands ends within n nodes in a DAG,
	// and must not hang on a graph that is not one.
	for steps := 0; len(inputs[bottom]) > 0 && steps < n; steps++ {
		next := inputs[bottom][0]
		for _, j := range inputs[bottom] {
			if depth[j] > depth[next] {
				next = j
			}
		}
		bottom = next
	}
	main := make([]bool, n)
	main[bottom] = true
	for i, in := range inputs {
		for _, j := range in {
			main[i] = main[i] || main[j]
		}
	}
	side := map[int]bool{}
	for i := range n {
		for _, g := range reads[i] {
			if _, seen := side[g]; !seen {
				side[g] = true
			}
			side[g] = side[g] && !main[i]
		}
	}
	return side
}
