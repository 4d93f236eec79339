//go:build cgo

package native

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

// What streaming weights needs beyond graph.go: backend buffers of a given
// size, tensors placed (and moved) in them, graph operands, and running a
// range of a graph's nodes. ggml keeps a tensor's operands, view source and
// data pointer in fields after the prefix graph.go reads; sdt_tensor_layout
// mirrors ggml.h's struct ggml_tensor up to the name (GGML_MAX_DIMS 4,
// GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10), and sdt_layout_check verifies
// it against ggml's own functions before anything relies on it.
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_backend;
struct ggml_backend_buffer;

struct sdt_tensor_layout {
	int type;
	struct ggml_backend_buffer * buffer;
	int64_t ne[4];
	size_t nb[4];
	int op;
	int32_t op_params[16];
	int32_t flags;
	struct ggml_tensor * src[10];
	struct ggml_tensor * view_src;
	size_t view_offs;
	void * data;
	char name[64];
};

// The leading fields of ggml's struct ggml_cgraph (ggml-impl.h); a range of
// nodes runs as ggml_graph_view makes it: the node array offset, the
// count shortened.
struct sdt_cgraph_prefix {
	int size;
	int n_nodes;
	int n_leafs;
	struct ggml_tensor ** nodes;
};

struct ggml_tensor * ggml_graph_node(struct ggml_cgraph * g, int i);
int ggml_graph_n_nodes(struct ggml_cgraph * g);
void * ggml_get_data(const struct ggml_tensor * t);
const char * ggml_get_name(const struct ggml_tensor * t);
struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_tensor * ggml_view_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, size_t offset);
size_t ggml_nbytes(const struct ggml_tensor * t);
struct ggml_backend_buffer * ggml_backend_alloc_buffer(struct ggml_backend * b, size_t size);
void * ggml_backend_buffer_get_base(struct ggml_backend_buffer * buf);
size_t ggml_backend_buffer_get_size(struct ggml_backend_buffer * buf);
size_t ggml_backend_buffer_get_alignment(struct ggml_backend_buffer * buf);
int ggml_backend_graph_compute(struct ggml_backend * b, struct ggml_cgraph * g);

#define SDT_LAYOUT(t) ((struct sdt_tensor_layout *) (t))

// sdt_layout_check returns 0 when the mirrored fields are where ggml puts
// them: c = a + b has a and b as operands, v views a at 8 bytes.
static int sdt_layout_check(struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c, struct ggml_tensor * v) {
	if (SDT_LAYOUT(c)->src[0] != a || SDT_LAYOUT(c)->src[1] != b || SDT_LAYOUT(c)->src[2] != NULL) return 1;
	if (SDT_LAYOUT(v)->view_src != a || SDT_LAYOUT(v)->view_offs != 8) return 2;
	if ((const char *) SDT_LAYOUT(a)->name != ggml_get_name(a)) return 3;
	if (&SDT_LAYOUT(a)->data == NULL || SDT_LAYOUT(a)->data != ggml_get_data(a)) return 4;
	return 0;
}

// sdt_operands writes, for nodes [i0, i1), ten operand slots each, every
// operand replaced by the tensor whose data it views (NULL: none).
static void sdt_operands(struct ggml_cgraph * g, int i0, int i1, struct ggml_tensor ** out) {
	for (int i = i0; i < i1; i++) {
		struct sdt_tensor_layout * n = SDT_LAYOUT(ggml_graph_node(g, i));
		for (int s = 0; s < 10; s++) {
			struct ggml_tensor * t = n->src[s];
			if (t != NULL && SDT_LAYOUT(t)->view_src != NULL) t = SDT_LAYOUT(t)->view_src;
			*out++ = t;
		}
	}
}

// sdt_refresh_views points every view among the graph's nodes at its
// source's data as it is now (ggml's view init does the same at allocation).
static void sdt_refresh_views(struct ggml_cgraph * g) {
	int n = ggml_graph_n_nodes(g);
	for (int i = 0; i < n; i++) {
		struct sdt_tensor_layout * t = SDT_LAYOUT(ggml_graph_node(g, i));
		if (t->view_src != NULL && SDT_LAYOUT(t->view_src)->data != NULL) {
			t->buffer = SDT_LAYOUT(t->view_src)->buffer;
			t->data = (char *) SDT_LAYOUT(t->view_src)->data + t->view_offs;
		}
	}
}

static void sdt_bind(struct ggml_tensor * t, struct ggml_backend_buffer * buf, size_t off) {
	SDT_LAYOUT(t)->buffer = buf;
	SDT_LAYOUT(t)->data = (char *) ggml_backend_buffer_get_base(buf) + off;
}

static void sdt_unbind(struct ggml_tensor * t) {
	SDT_LAYOUT(t)->buffer = NULL;
	SDT_LAYOUT(t)->data = NULL;
}

// sdt_node_sources writes the ten operand slots of every node, unresolved.
static void sdt_node_sources(struct ggml_cgraph * g, struct ggml_tensor ** out) {
	int n = ggml_graph_n_nodes(g);
	for (int i = 0; i < n; i++) {
		memcpy(out + 10 * i, SDT_LAYOUT(ggml_graph_node(g, i))->src, 10 * sizeof(struct ggml_tensor *));
	}
}

// sdt_set_nodes replaces the graph's node order.
static void sdt_set_nodes(struct ggml_cgraph * g, struct ggml_tensor ** nodes) {
	struct sdt_cgraph_prefix * p = (struct sdt_cgraph_prefix *) g;
	memcpy(p->nodes, nodes, p->n_nodes * sizeof(struct ggml_tensor *));
}

static int sdt_compute_range(struct ggml_backend * b, struct ggml_cgraph * g, int i0, int i1) {
	struct sdt_cgraph_prefix * p = (struct sdt_cgraph_prefix *) g;
	struct ggml_tensor ** nodes = p->nodes;
	int n = p->n_nodes;
	p->nodes = nodes + i0;
	p->n_nodes = i1 - i0;
	int st = ggml_backend_graph_compute(b, g);
	p->nodes = nodes;
	p->n_nodes = n;
	return st;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// ErrLayout is returned when the linked ggml's tensor struct is not laid
// out as streaming expects (a ggml newer than the one checked).
var ErrLayout = errors.New("ggml: the tensor struct's layout differs from the one streaming was written for")

var layoutOnce = sync.OnceValue(func() error {
	c, err := NewContext(4, 0)
	if err != nil {
		return err
	}
	defer c.Free()
	a, err := c.NewTensor(formats.F32, 8)
	if err != nil {
		return err
	}
	b, err := c.NewTensor(formats.F32, 8)
	if err != nil {
		return err
	}
	sum := C.ggml_add(c.c, a.p, b.p)
	v := C.ggml_view_1d(c.c, a.p, 2, 8)
	if st := C.sdt_layout_check(a.p, b.p, sum, v); st != 0 {
		return fmt.Errorf("%w (check %d)", ErrLayout, int(st))
	}
	return nil
})

// CheckStreamLayout verifies, once, that the fields the streaming calls
// below read and write are where the linked ggml keeps them.
func CheckStreamLayout() error { return layoutOnce() }

// AllocBuffer allocates a backend buffer of size bytes for tensors placed with Bind.
func (b *Backend) AllocBuffer(size int64) (*Buffer, error) {
	if size <= 0 {
		size = 1
	}
	p := C.ggml_backend_alloc_buffer(b.b, C.size_t(size))
	if p == nil {
		return nil, fmt.Errorf("ggml: allocating a buffer of %d bytes failed", size)
	}
	return &Buffer{p}, nil
}

// Alignment returns the alignment a tensor's offset in the buffer needs.
func (buf *Buffer) Alignment() int64 { return int64(C.ggml_backend_buffer_get_alignment(buf.p)) }

// Host returns the buffer's memory (the CPU backend's buffers are host
// memory), valid until Free, so that data can be read straight into it.
func (buf *Buffer) Host() []byte {
	return unsafe.Slice((*byte)(C.ggml_backend_buffer_get_base(buf.p)), buf.Size())
}

// Bind places t's data at off in buf, replacing wherever it was: the caller
// manages the buffer's memory (weights moved between resident buffers and
// streaming slots). Views made of t follow after Graph.RefreshViews.
func (t Tensor) Bind(buf *Buffer, off int64) error {
	if off < 0 || off%buf.Alignment() != 0 || off+t.Bytes() > buf.Size() {
		return fmt.Errorf("ggml: %d bytes at %d do not fit a buffer of %d bytes aligned to %d", t.Bytes(), off, buf.Size(), buf.Alignment())
	}
	C.sdt_bind(t.p, buf.p, C.size_t(off))
	return nil
}

// Unbind leaves t without data (a graph allocator would then place it).
func (t Tensor) Unbind() { C.sdt_unbind(t.p) }

// Operands calls visit with every operand of the nodes of g, in node order,
// each view replaced by the tensor whose data it views.
func (g *Graph) Operands(visit func(node int, operand Tensor)) {
	n := g.Nodes()
	if n == 0 {
		return
	}
	out := make([]*C.struct_ggml_tensor, 10*n)
	C.sdt_operands(g.g, 0, C.int(n), &out[0])
	for i, p := range out {
		if p != nil {
			visit(i/10, Tensor{p})
		}
	}
}

// NodeInputs returns, for each node of g, the indexes of the nodes among its operands.
func (g *Graph) NodeInputs() [][]int {
	n := g.Nodes()
	if n == 0 {
		return nil
	}
	index := make(map[*C.struct_ggml_tensor]int, n)
	for i := range n {
		index[C.ggml_graph_node(g.g, C.int(i))] = i
	}
	raw := make([]*C.struct_ggml_tensor, 10*n)
	C.sdt_node_sources(g.g, &raw[0])
	out := make([][]int, n)
	for i := range n {
		for _, p := range raw[10*i : 10*i+10] {
			if j, ok := index[p]; ok && p != nil {
				out[i] = append(out[i], j)
			}
		}
	}
	return out
}

// Reorder puts g's nodes in a new order, order[k] being the old index of
// the k-th node; every node must come after the nodes it reads. Reorder
// before allocating the graph: the allocator plans by the order.
func (g *Graph) Reorder(order []int) error {
	n := g.Nodes()
	if len(order) != n {
		return fmt.Errorf("ggml: an order of %d nodes for a graph of %d", len(order), n)
	}
	inputs := g.NodeInputs()
	pos := make([]int, n)
	for i := range pos {
		pos[i] = -1
	}
	for k, i := range order {
		if i < 0 || i >= n || pos[i] >= 0 {
			return fmt.Errorf("ggml: the order is not a permutation of the graph's %d nodes", n)
		}
		pos[i] = k
	}
	nodes := make([]*C.struct_ggml_tensor, n)
	for k, i := range order {
		for _, j := range inputs[i] {
			if pos[j] > k {
				return fmt.Errorf("ggml: node %d would run before node %d, which it reads", i, j)
			}
		}
		nodes[k] = C.ggml_graph_node(g.g, C.int(i))
	}
	C.sdt_set_nodes(g.g, &nodes[0])
	return nil
}

// RefreshViews points every view node of g at its source's current data
// (after Bind moved a source).
func (g *Graph) RefreshViews() { C.sdt_refresh_views(g.g) }

// ComputeRange runs nodes [i0, i1) of an allocated graph: computing the
// ranges of a graph one after another in order computes the graph.
func (b *Backend) ComputeRange(g *Graph, i0, i1 int) error {
	if i0 < 0 || i1 > g.Nodes() || i0 >= i1 {
		return fmt.Errorf("ggml: node range [%d, %d) of a graph of %d nodes", i0, i1, g.Nodes())
	}
	switch st := C.sdt_compute_range(b.b, g.g, C.int(i0), C.int(i1)); st {
	case 0:
	case 1:
		return ErrAborted
	default:
		return fmt.Errorf("ggml: graph compute failed with status %d", int(st))
	}
	return nil
}
