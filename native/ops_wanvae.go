//go:build cgo

package native

/*
// ggml's copy, declared here (beside graph.go's declarations) so that this
// addition stays in its own file.
struct ggml_context;
struct ggml_tensor;
struct ggml_tensor * ggml_cpy(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
*/
import "C"

import "github.com/sdtool/sdtool/formats"

// Copy returns the node that writes a's values into b, converting them to
// b's type (F32 or F16): b may be a view of a tensor in a buffer of its
// own, which keeps state that one graph leaves to the next. The node must
// be added to the graph (Graph.Expand) after every node that reads b's old values.
func (c *Context) Copy(a, b Tensor) Tensor {
	if a.Elements() != b.Elements() {
		shapeErr("copy: %v into %v", a.Ne(), b.Ne())
	}
	for _, t := range []formats.DType{a.Type(), b.Type()} {
		if t != formats.F32 && t != formats.F16 {
			shapeErr("copy: %s to %s", a.Type(), b.Type())
		}
	}
	return c.op(C.ggml_cpy(c.c, a.p, b.p))
}
