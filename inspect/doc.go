// Package inspect summarises checkpoints: format facts, metadata, parameter
// and byte counts per type, the detected architecture and components,
// ComfyUI quantized modules, names too long for some readers, adapter files
// (LoRA and its kin, through package lora: naming, kinds, ranks, alphas,
// target family), and the tensor table. It reads headers only (plus the few
// bytes of comfy_quant markers and adapter alphas).
// Diff compares two models tensor by tensor through package tensor, in
// bounded memory.
//
// On the map (docs/design.md) inspect stands beside the writing commands: it
// reads through formats, formats/comfyquant, names (architecture
// detection), lora (adapters) and tensor, and uses package pipeline only for its size
// formatting.
package inspect
