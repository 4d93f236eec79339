// Package quantize plans `sdtool quantize`, the llama-quantize-style
// command: one model in (GGUF, safetensors, sharded, .ckpt), one file out,
// GGUF for ggml types and llama.cpp mixes tuned for image models (package
// quant/mix), or ComfyUI comfy_quant safetensors for the INT8 and FP8 types
// (package convrot). It handles requantization, user type rules,
// importance matrices with llama.cpp's arithmetic, the metadata
// ComfyUI-GGUF expects, shapes (no trimming, 5-D folding, --reshape-conv;
// CLIP's integer position_ids left out of GGUF outputs, as sd-cli's
// convert leaves it) and a report of which consumers can load the output. Plan turns an
// invocation (Options) into a *pipeline.Plan and a Report.
//
// On the map (docs/design.md) quantize stands beside convert and merge, above
// pipeline, tensor, names and quant; none of the three imports another.
package quantize
