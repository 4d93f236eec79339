// Package merge plans `sdtool merge`: rule-based grafting of tensors from
// several files into one (a Recipe: per-source include/exclude regexes,
// prefix, strip_prefix and renames, conflicts refused, bytes copied without
// decoding) and element-wise arithmetic merges of two or three models
// (weighted_sum, add_difference, ties, dare, slerp) computed in float32.
// PlanRecipe and PlanArithmetic check everything and return a
// *pipeline.Plan, which pipeline.Run writes with bounded memory and
// Plan.WriteTable lists for --dry-run (where every output tensor comes
// from and how it is made).
//
// On the map (DESIGN.md) merge stands beside convert and quantize, above
// pipeline, tensor and quant; none of the three imports another.
package merge
