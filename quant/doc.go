// Package quant holds sdtool's codecs for every tensor type: float
// conversions and ggml's block quantizers and dequantizers, with and without
// importance weights, plus row-parallel helpers.
//
// On the map (DESIGN.md) quant sits above formats; its subpackages mix
// (type policy), imatrix (importance matrix files) and convrot (ComfyUI
// INT8/FP8) and package tensor build on it, and native/codecs adds
// ggml-backed codecs to its registry.
package quant
