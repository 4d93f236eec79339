//go:build !cgo

package native

import "errors"

// ErrLayout is returned when the linked ggml's tensor struct is not laid
// out as streaming expects (a ggml newer than the one checked).
var ErrLayout = errors.New("ggml: the tensor struct's layout differs from the one streaming was written for")

// CheckStreamLayout verifies, once, that the fields the streaming calls
// below read and write are where the linked ggml keeps them.
func CheckStreamLayout() error { return ErrNoCgo }

// AllocBuffer allocates a backend buffer of size bytes for tensors placed with Bind.
func (b *Backend) AllocBuffer(size int64) (*Buffer, error) { return nil, ErrNoCgo }

// Alignment returns the alignment a tensor's offset in the buffer needs.
func (buf *Buffer) Alignment() int64 { return 1 }

// Host returns the buffer's memory (the CPU backend's buffers are host
// memory), valid until Free, so that data can be read straight into it.
func (buf *Buffer) Host() []byte { return nil }

// Bind places t's data at off in buf, replacing wherever it was: the caller
// manages the buffer's memory (weights moved between resident buffers and
// streaming slots). Views made of t follow after Graph.RefreshViews.
func (t Tensor) Bind(buf *Buffer, off int64) error { return ErrNoCgo }

// Unbind leaves t without data (a graph allocator would then place it).
func (t Tensor) Unbind() {}

// Operands calls visit with every operand of the nodes of g, in node order,
// each view replaced by the tensor whose data it views.
func (g *Graph) Operands(visit func(node int, operand Tensor)) {}

// RefreshViews points every view node of g at its source's current data
// (after Bind moved a source).
func (g *Graph) RefreshViews() {}

// ComputeRange runs nodes [i0, i1) of an allocated graph: computing the
// ranges of a graph one after another in order computes the graph.
func (b *Backend) ComputeRange(g *Graph, i0, i1 int) error { return ErrNoCgo }

// NodeInputs returns, for each node of g, the indexes of the nodes among its operands.
func (g *Graph) NodeInputs() [][]int { return nil }

// Reorder puts g's nodes in a new order, order[k] being the old index of
// the k-th node; every node must come after the nodes it reads. Reorder
// before allocating the graph: the allocator plans by the order.
func (g *Graph) Reorder(order []int) error { return ErrNoCgo }
