// Package sd is generate's Stable Diffusion family (SD 1.x, 2.x, SDXL and
// its refiner): the engine entries (family_sd.go), the LDM UNet (its
// configuration from shapes, its graph, network "unet") and the CLIP
// conditioner with SDXL's size vector (conditioner "clip"). It registers
// them with package infer from init.
package sd
