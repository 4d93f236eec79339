// Package mix decides which type each tensor gets when `sdtool quantize`
// writes a llama.cpp-style mix (Q4_K_M, Q5_K_S, ...) for a diffusion model:
// the ftype table, eligibility, per-architecture never-quantize lists, the
// image-model upgrades of V projections, fused qkv and FFN-down weights,
// user rules and the row-size fallback.
//
// On the map (docs/design.md) it sits with the other codec policies above quant
// and formats; package quantize asks it for every tensor's type.
package mix
