// Package kl is the LDM AutoencoderKL VAE kind ("kl") and Flux.2's VAE
// built on it ("flux2": the same decoder with 2x2 patches and per-channel
// latent statistics): their configuration from shapes and their decoder
// and encoder graphs, registered with package infer from init.
package kl
