//go:build cgo

package native

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <math.h>

// ggml's custom-op entry point (declared here, beside infer.go's
// declarations, so that this addition stays in its own file).
struct ggml_context;
struct ggml_tensor;
typedef void (*sdt_custom_op_t)(struct ggml_tensor * dst, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_custom_4d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
	struct ggml_tensor ** args, int n_args, sdt_custom_op_t fun, int n_tasks, void * userdata);
void * ggml_get_data(const struct ggml_tensor * t);

struct sdt_stats_prefix {
	int type;
	void * buffer;
	int64_t ne[4];
	size_t nb[4];
};

// sdt_column_squares computes dst [K, 2] from the F32 activation x
// (userdata; also dst's source, so that the graph orders them): row 0 the
// sum of x² over every row and slice for each of the K columns, row 1 how
// many of those values were finite. Non-finite values are left out, as
// stable-diffusion.cpp's collector does. Threads split the columns; each
// accumulates a block of columns in double over all rows.
static void sdt_column_squares(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	const struct ggml_tensor * x = (const struct ggml_tensor *) userdata;
	const struct sdt_stats_prefix * xp = (const struct sdt_stats_prefix *) x;
	const char * data = (const char *) ggml_get_data(x);
	float * out = (float *) ggml_get_data(dst);
	const int64_t k = xp->ne[0];
	const int64_t per = (k + nth - 1) / nth;
	const int64_t j0 = per * ith, j1 = j0 + per < k ? j0 + per : k;
	enum { BLOCK = 256 };
	double sum[BLOCK];
	int64_t cnt[BLOCK];
	for (int64_t b = j0; b < j1; b += BLOCK) {
		const int64_t n = j1 - b < BLOCK ? j1 - b : BLOCK;
		for (int64_t j = 0; j < n; j++) {
			sum[j] = 0;
			cnt[j] = 0;
		}
		for (int64_t i3 = 0; i3 < xp->ne[3]; i3++)
		for (int64_t i2 = 0; i2 < xp->ne[2]; i2++)
		for (int64_t i1 = 0; i1 < xp->ne[1]; i1++) {
			const char * row = data + i1 * xp->nb[1] + i2 * xp->nb[2] + i3 * xp->nb[3];
			for (int64_t j = 0; j < n; j++) {
				const float v = *(const float *) (row + (b + j) * xp->nb[0]);
				if (isfinite(v)) {
					sum[j] += (double) v * (double) v;
					cnt[j]++;
				}
			}
		}
		for (int64_t j = 0; j < n; j++) {
			out[b + j] = (float) sum[j];
			out[k + b + j] = (float) cnt[j];
		}
	}
}

static struct ggml_tensor * sdt_column_squares_op(struct ggml_context * ctx, struct ggml_tensor * x) {
	struct ggml_tensor * args[1] = { x };
	const struct sdt_stats_prefix * xp = (const struct sdt_stats_prefix *) x;
	return ggml_custom_4d(ctx, 0, xp->ne[0], 2, 1, 1, args, 1, sdt_column_squares, -1, x);
}
*/
import "C"

import "github.com/sdtool/sdtool/formats"

// ColumnSquares returns, for an F32 activation x [K, ...] (K = ne0, the
// input width of a matrix product W·x), a [K, 2] F32 tensor: its first K
// values are Σx² over every row and slice per column, the next K how many
// of those values were finite (non-finite ones are left out of the sum).
// It is how imatrix collection measures a weight's input columns inside the
// graph, without an eval callback: one multithreaded custom op per product,
// which costs K operations per row where the product costs K·M.
func (c *Context) ColumnSquares(x Tensor) Tensor {
	if x.Type() != formats.F32 {
		shapeErr("column squares: %s activation (want f32)", x.Type())
	}
	return c.op(C.sdt_column_squares_op(c.c, x.p))
}
