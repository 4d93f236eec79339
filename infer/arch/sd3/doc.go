// Package sd3 is generate's SD 3/3.5 family: the engine entries, the MMDiT
// (network "mmdit") built from package flux's blocks, and its CLIP-L,
// CLIP-G and T5 conditioner (conditioner "sd3"). It registers them with
// package infer from init.
package sd3
