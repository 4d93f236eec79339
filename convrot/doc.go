// Package convrot holds the codecs of ComfyUI's quantized linear layers:
// INT8 with a block Hadamard rotation ("convrot"), plain per-row INT8, FP8
// with a tensor-wise scale, NVFP4 and MXFP8 with block scales in cuBLAS's
// swizzled layout (blockfp.go), and the rotated 4-bit formats convrot_w4a4
// and asym_w4a8_int8 (int4.go); and Layer, which says how one linear weight
// is written (marker config, output tensors, codec). The block formats'
// numbers are in docs/comfy-formats.md.
//
// # The numbers
//
// For a linear layer whose weight W has shape [out, in]:
//
//   - Rotation. H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]/2 and
//     H_G = H4⊗H4⊗…⊗H4 (n factors) for a group size G = 4^n. H_G is
//     orthogonal and symmetric, so H_G·H_G = I and the same transform undoes
//     itself. Every contiguous group of G input columns of a row is
//     multiplied by H_G (W_rot = W·R, R block diagonal); a loader rotates the
//     activations the same way, so X_rot·W_rotᵀ = X·Wᵀ.
//   - INT8. Per output row o: s[o] = max(max_i |W_rot[o,i]| / 127, 1e-30) and
//     q[o,i] = clamp(roundHalfEven(W_rot[o,i] / s[o]), -127, 127). The floor
//     of 1e-30 (ComfyUI kitchen's) keeps a zero row from dividing by zero;
//     its codes are all 0, so it dequantizes to exact zeros.
//   - FP8. One F32 scale per tensor: amax/448 for float8_e4m3fn and
//     amax/57344 for float8_e5m2 (the largest finite value of each format),
//     with the same 1e-30 floor; the weight stores W/scale saturated to the
//     format's range.
//
// Decoding is exact as defined: INT8 gives q·s (float32), then the rotation
// again when convrot is set; FP8 gives decode(code)·scale.
//
// The package sits in quant/ beside the ggml codecs (see docs/design.md). The
// container side (which tensors form a module, the comfy_quant marker) is
// package formats/comfyquant, which it imports; package tensor decodes
// stored modules to float32 with these codecs, and package quantize plans
// whole files with Layer.
package convrot
