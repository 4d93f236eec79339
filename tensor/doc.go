// Package tensor reads any tensor of an opened model as float32 values, in
// element ranges and bounded memory: plain float and integer dtypes, ggml
// block types with a registered dequantizer (package quant), and ComfyUI
// quantized linear layers (comfy_quant INT8 with or without the convrot
// rotation, FP8 with a scale, nvfp4, mxfp8, convrot_w4a4 and
// asym_w4a8_int8, the packed 4-bit ones at their logical [out, in] shape),
// found by formats/comfyquant and decoded exactly with the convrot
// codecs.
//
// NewView lists a model's tensors as Sources; Source.Read decodes any
// element range; Dequantized presents a model whose ComfyUI modules read as
// plain F32 tensors. A model that computes some tensors (Computed: a base
// with adapters baked in) hands their float32 values to Read directly.
// Scratch is the one set of reusable buffers that the
// pipeline's workers, the readers and the producers share.
//
// On the map (docs/design.md) the package sits below pipeline and above quant
// and formats: the writing commands, inspect's diff, merge and infer read
// their inputs through it, and it knows nothing of outputs.
package tensor
