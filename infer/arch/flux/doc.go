// Package flux is generate's Flux family and the two families built from
// its blocks, as stable-diffusion.cpp keeps them in one file: Flux.1 (the
// MMDiT, network "flux", its conditioner and flow schedule), Chroma
// (network and conditioner "chroma") and Flux.2 klein and dev (network and
// schedule "flux2", conditioners "flux2" and "flux2_dev"). Its DiT blocks
// (attention, modulation, RoPE, patchify, the inputs of one evaluation)
// are exported for the other DiT families (SD3, Qwen-Image, Z-Image, Wan),
// which import it. It registers its parts with package infer from init.
package flux
