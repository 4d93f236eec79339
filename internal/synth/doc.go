// Package synth generates synthetic checkpoints with the real tensor names
// and shapes of diffusion-model architectures (Stable Diffusion 1.x, SDXL,
// Flux, Wan, and the SD1 UNet, VAE, CLIP-L and T5-XXL alone) at a chosen scale, filled with deterministic pseudo-random
// data. Tests and benchmarks use it to get realistic files of any size; the
// data is produced on the fly, so multi-gigabyte outputs take bounded memory.
//
// It is the one generator: the models sdtool generate runs are SD presets
// (sd.go) built by the same UNet, VAE and CLIP builders as the scaled
// architectures; testdata/tiny-sd1.gguf and testdata/tiny-sd1.safetensors
// are one of them, TinySD, in both formats. It writes through the pipeline's atomic publish and
// the formats' Create registry, so on the map (docs/design.md) it stands with
// the commands; tests and cmd/gensynth import it.
package synth
