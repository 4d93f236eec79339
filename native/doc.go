// Package native is sdtool's binding to ggml; it and its test-only sibling
// native/ggmltest are the only packages that import "C". It links ggml's base and CPU backend
// (compiled by the blank-imported ollama module) and declares, in its own
// C preambles, the part of ggml's C API that sdtool runs:
//
//   - graph.go: contexts of tensor descriptors, the ops inference builds
//     graphs from, graphs, the CPU backend, weight buffers and the graph
//     allocator;
//   - colsq.go: a custom op (ColumnSquares) that measures the input columns
//     of matrix products inside a graph, for imatrix collection;
//   - ops_kquant.go: MulMat's q6_K product as stable-diffusion.cpp's ggml
//     sums it (the linked ggml's kernel splits the integer sums into other
//     float lanes), two custom ops that MulMat builds by itself;
//   - ggml.go: ggml's quantizer (QuantizeChunkInto, QuantizeInit,
//     RequiresImatrix), which native/codecs registers for the grid IQ types.
//
// Each of those files has a twin built without cgo (graph_nocgo.go,
// colsq_nocgo.go, ggml_nocgo.go) with the same API: there Available is false,
// constructors return ErrNoCgo and ops panic with it (Recover turns that into
// an error), so that callers such as infer need no build tags. native.go
// holds what both builds share; a test holds the twins to the same API.
//
// On the map: native imports only formats. infer builds on it; native/codecs
// adds its codecs to quant's registry; native/ggmltest exposes ggml's own
// quantizers, dequantizers and GGUF reader as oracles for tests.
package native
