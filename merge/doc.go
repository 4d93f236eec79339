// Package merge plans `sdtool merge` and `sdtool lora extract`: rule-based
// grafting of tensors from several files into one (a Recipe: per-source
// include/exclude regexes, prefix, strip_prefix and renames, conflicts
// refused, bytes copied without decoding), element-wise arithmetic merges
// of two or three models (weighted_sum, add_difference, ties, dare, slerp)
// computed in float32, baking LoRA-style adapters into a model (OpenBake:
// the base with every delta added, read lazily through package lora, which
// PlanOutput writes keeping the base's types or in one float type, and
// which any other planner reading through package tensor can write too),
// and extracting a kohya-format LoRA from two checkpoints (OpenExtract:
// truncated SVD per layer, factors spilled beside the output until it is
// written). PlanRecipe, PlanArithmetic and the Plan methods check everything
// and return a *pipeline.Plan, which pipeline.Run writes with bounded
// memory and Plan.WriteTable lists for --dry-run (where every output tensor
// comes from and how it is made).
//
// On the map (docs/design.md) merge stands beside convert and quantize, above
// lora, pipeline, tensor and quant; none of the three imports another (the
// command hands a bake to quantize's planner when the output is quantized).
package merge
