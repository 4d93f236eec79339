// Package imatrix reads, writes and merges importance matrices: llama.cpp's
// legacy .dat format (also what stable-diffusion.cpp writes) and llama.cpp's
// GGUF imatrix, and turns them into the per-column importance vectors that
// the quantizers take.
//
// On the map (docs/design.md) it sits with the other codec policies, above
// formats/gguf, which its GGUF format uses.
package imatrix
