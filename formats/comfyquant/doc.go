// Package comfyquant reads and writes the container layout of ComfyUI's
// quantized linear layers: which tensors make up a module and what the
// `<module>.comfy_quant` marker says.
//
// For a linear layer whose weight has shape [out, in], a module <m> is
// stored as <m>.weight (I8 or F8 [out, in]), <m>.weight_scale (F32 [out, 1]
// for INT8, a 0-d F32 scalar for FP8) and <m>.comfy_quant, a U8 tensor
// holding a small JSON object such as
//
//	{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}
//
// ComfyUI's other formats add their own tensors: nvfp4 (U8 [out, in/2]
// weights, swizzled F8_E4M3 weight_scale, F32 weight_scale_2), mxfp8
// (swizzled E8M0 weight_scale), convrot_w4a4 (I8 [out, in/2], F32
// weight_scale [out]) and asym_w4a8_int8 (I8 [out, in/2], weight_s_rel,
// weight_s_channel, weight_codebook); docs/comfy-formats.md has them all.
//
// Older files describe their layers in the safetensors metadata entry
// "_quantization_metadata" instead, or mark FP8 weights with a "scaled_fp8"
// tensor and <m>.scale_weight; Detect finds all three. Biases and every
// other tensor are stored as they are.
//
// The package is one room of the formats/ floor (see docs/design.md): struct.go
// holds the definitions the reader and writer share, reader.go parses
// markers and finds modules (Detect), block.go checks the tensors of the
// four block formats, writer.go marshals markers and lays out a module's
// tensors (NewLayout). It knows the layout, not the numbers: the codecs and
// the Hadamard rotation are in convrot, and
// package tensor decodes modules to float32. It imports only formats.
package comfyquant
