// Package quant holds sdtool's codecs for every tensor type: float
// conversions and ggml's block quantizers and dequantizers, with and without
// importance weights, plus row-parallel helpers.
//
// On the map (docs/design.md) quant sits above formats; its subpackages mix
// (type policy), imatrix (importance matrix files) and convrot (ComfyUI
// INT8/FP8) and package tensor build on it, and native/codecs adds
// ggml-backed codecs to its registry.
//
// The hot loops run as vector kernels where the CPU has them (AVX2 and
// AVX-512 on amd64, NEON on arm64; kernels.go), each lane doing ggml's
// float32 operations in ggml's order, so the bytes are ggml's on every path;
// the purego build tag leaves the assembly out.
package quant
