// Package merge builds `sdtool merge` plans: rule-based grafting of tensors
// from several files into one (a Recipe: per-source include/exclude regexes,
// prefix, strip_prefix and renames, conflicts refused, bytes copied without
// decoding) and element-wise arithmetic merges of two or three models
// (weighted_sum, add_difference, ties, dare, slerp) computed in float32.
// Both stream through package pipeline with bounded memory: PlanRecipe or
// PlanArithmetic checks everything and returns a Plan, whose Run writes
// OUT.partial and renames it when complete, and whose WriteDryRun lists
// where every output tensor comes from.
package merge
