// Package diffusers opens a Hugging Face diffusers folder of a Stable
// Diffusion 1.x/2.x/XL pipeline as one formats.Model, the way
// stable-diffusion.cpp reads it: the UNet (required), the VAE and the one or
// two CLIP text encoders, each renamed with sd.cpp's prefix ("unet.",
// "vae.", "te.", "te.1."). Each component may be a single safetensors file,
// a sharded one (NAME.safetensors.index.json), or a PyTorch .bin checkpoint
// (read with formats/ckpt); tensor data is read on demand from the
// component files, which are never modified.
//
// The package is one room of the formats/ floor (see docs/design.md), above the
// safetensors and ckpt rooms it reads the components with; it registers the
// folder layout with formats.Open. There is no writer: sdtool writes single
// files, so formats.Create has no folder format.
package diffusers
