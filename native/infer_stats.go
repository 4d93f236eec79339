//go:build cgo

package native

/*
#include <stdint.h>
#include <stdbool.h>

// The two ggml ops behind SumSquaresPerColumn (declared here, beside
// infer.go's declarations, so that this addition stays in its own file).
struct ggml_context;
struct ggml_tensor;
struct ggml_tensor * ggml_sqr(struct ggml_context * ctx, struct ggml_tensor * a);
struct ggml_tensor * ggml_repeat_back(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
bool ggml_is_contiguous(const struct ggml_tensor * t);
*/
import "C"

import "github.com/sdtool/sdtool/formats"

// SumSquaresPerColumn returns, for an F32 activation x [K, ...], the sum of
// x² over every row and slice for each of the K elements of a row: a [K]
// tensor (K = ne0, the input width of a matrix product W·x). It is how
// imatrix collection measures a weight's input columns inside the graph,
// without an eval callback. ggml's repeat_back (the reduction that undoes a
// broadcast) sums the rows; it runs on one thread, which is cheap next to
// the product it watches (that costs K·M multiply-adds per row, this K).
func (c *Context) SumSquaresPerColumn(x Tensor) Tensor {
	if x.Type() != formats.F32 {
		shapeErr("sum of squares: %s activation (want f32)", x.Type())
	}
	if !bool(C.ggml_is_contiguous(x.p)) {
		x = c.Cont(x)
	}
	sq := c.op(C.ggml_sqr(c.c, x.p))
	shape, err := c.NewTensor(formats.F32, x.Ne()[0]) // only its shape is used
	if err != nil {
		panic(err)
	}
	return c.op(C.ggml_repeat_back(c.c, sq.p, shape.p))
}
