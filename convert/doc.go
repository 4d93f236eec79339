// Package convert reproduces stable-diffusion.cpp's convert mode (`sd-cli -M
// convert`): how inputs are loaded and named (Load, with family.ConvertInputs), which
// tensors change type (Decide), and the --tensor-type-rules semantics, so
// that sdtool writes the same GGUF bytes. Plan turns an invocation
// (Options) into a *pipeline.Plan, which pipeline.Run writes and
// Plan.WriteTable prints for --dry-run.
//
// On the map (docs/design.md) convert stands beside quantize and merge, above
// pipeline, tensor, names and quant; none of the three imports another.
package convert
