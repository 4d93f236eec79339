//go:build cgo

package native

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>

// ggml's custom-op entry point (declared here, beside graph.go's
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

// sdt_colsq_group lists the activations one column-squares op measures.
// It lives in C memory (ggml keeps only the pointer) and is freed when the
// Go Context that built the op is collected.
enum { SDT_COLSQ_MAX = 9 }; // ggml takes fewer than GGML_MAX_SRC (10) sources
struct sdt_colsq_group {
	int n;
	const struct ggml_tensor * x[SDT_COLSQ_MAX];
};

// sdt_colsq_one accumulates one F32 activation x [K, ...] into out: K sums
// of x² over every row and slice at out[0..K), at cnt[0..K) how many of
// those values were finite, and at amax[0..K) their largest magnitude.
// Non-finite values are left out, as stable-diffusion.cpp's collector
// does. Threads split the columns; each accumulates a block of columns in
// double over all rows.
static void sdt_colsq_one(const struct ggml_tensor * x, float * out, float * cnt, float * amax, int ith, int nth) {
	const struct sdt_stats_prefix * xp = (const struct sdt_stats_prefix *) x;
	const char * data = (const char *) ggml_get_data(x);
	const int64_t k = xp->ne[0];
	const int64_t per = (k + nth - 1) / nth;
	const int64_t j0 = per * ith, j1 = j0 + per < k ? j0 + per : k;
	enum { BLOCK = 256 };
	double sum[BLOCK];
	int64_t fin[BLOCK];
	float big[BLOCK];
	for (int64_t b = j0; b < j1; b += BLOCK) {
		const int64_t n = j1 - b < BLOCK ? j1 - b : BLOCK;
		for (int64_t j = 0; j < n; j++) {
			sum[j] = 0;
			fin[j] = 0;
			big[j] = 0;
		}
		for (int64_t i3 = 0; i3 < xp->ne[3]; i3++)
		for (int64_t i2 = 0; i2 < xp->ne[2]; i2++)
		for (int64_t i1 = 0; i1 < xp->ne[1]; i1++) {
			const char * row = data + i1 * xp->nb[1] + i2 * xp->nb[2] + i3 * xp->nb[3];
			for (int64_t j = 0; j < n; j++) {
				const float v = *(const float *) (row + (b + j) * xp->nb[0]);
				if (isfinite(v)) {
					sum[j] += (double) v * (double) v;
					fin[j]++;
					big[j] = fabsf(v) > big[j] ? fabsf(v) : big[j];
				}
			}
		}
		for (int64_t j = 0; j < n; j++) {
			out[b + j] = (float) sum[j];
			cnt[b + j] = (float) fin[j];
			amax[b + j] = big[j];
		}
	}
}

// sdt_column_squares fills dst [ΣK, 3]: row 0 the sums of every activation
// of the group, one after the other, row 1 their finite counts, row 2
// their largest magnitudes.
static void sdt_column_squares(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
	const struct sdt_colsq_group * g = (const struct sdt_colsq_group *) userdata;
	const int64_t total = ((const struct sdt_stats_prefix *) dst)->ne[0];
	float * out = (float *) ggml_get_data(dst);
	int64_t off = 0;
	for (int i = 0; i < g->n; i++) {
		sdt_colsq_one(g->x[i], out + off, out + total + off, out + 2 * total + off, ith, nth);
		off += ((const struct sdt_stats_prefix *) g->x[i])->ne[0];
	}
}

static struct ggml_tensor * sdt_column_squares_op(struct ggml_context * ctx, struct sdt_colsq_group * g, int64_t total) {
	return ggml_custom_4d(ctx, 0, total, 3, 1, 1, (struct ggml_tensor **) g->x, g->n, sdt_column_squares, -1, g);
}
*/
import "C"

import (
	"runtime"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// The C side's bound is MaxColumnSquares; this fails to compile when they differ.
const _ = uint(MaxColumnSquares-C.SDT_COLSQ_MAX) + uint(C.SDT_COLSQ_MAX-MaxColumnSquares)

// ColumnSquares returns, for F32 activations xs (1 to MaxColumnSquares;
// each [K_i, ...], K_i = ne0, the input width of a matrix product W·x), a
// [ΣK_i, 3] F32 tensor: its first ΣK_i values are, activation after
// activation, Σx² over every row and slice per column, the next ΣK_i how
// many of those values were finite (non-finite ones are left out), the
// last ΣK_i the largest |x| per column (what an activation scale needs).
// It is how imatrix collection measures weights' input columns inside
// the graph, without an eval callback: one multithreaded custom op for
// several products, which costs K operations per row where a product costs
// K·M. Grouping keeps the node count (and so ggml's per-node thread
// barriers) low.
func (c *Context) ColumnSquares(xs ...Tensor) Tensor {
	if len(xs) == 0 || len(xs) > MaxColumnSquares {
		shapeErr("column squares: %d activations (want 1 to %d)", len(xs), MaxColumnSquares)
	}
	var total int64
	for _, x := range xs {
		if x.Type() != formats.F32 {
			shapeErr("column squares: %s activation (want f32)", x.Type())
		}
		total += x.Ne()[0]
	}
	g := (*C.struct_sdt_colsq_group)(C.calloc(1, C.sizeof_struct_sdt_colsq_group))
	if g == nil {
		panic(ErrContextFull) // out of C memory: fail the graph, not the process
	}
	// ggml reads the group while computing a graph of c, which ends before
	// c becomes unreachable (graphs are computed while their context lives).
	runtime.AddCleanup(c, func(p unsafe.Pointer) { C.free(p) }, unsafe.Pointer(g))
	g.n = C.int(len(xs))
	for i, x := range xs {
		g.x[i] = x.p
	}
	return c.op(C.sdt_column_squares_op(c.c, g, C.int64_t(total)))
}
