// Package infer is sdtool's diffusion engine: it loads a model's weights
// into ggml (through package native) and generates images with them, for
// generate and for collecting importance matrices.
//
// The engine core is family-neutral:
//
//   - family.go: the family table (Families: detection markers, text
//     encoders, conditioning-vector layout, latent format, sd-cli's
//     defaults) and the registries of engine parts the table names;
//   - load.go, load_ggml.go: the component files (Components, as sd-cli's
//     -m, --diffusion-model, --clip_l, --clip_g, --t5xxl and --vae), which
//     weights the graphs read, renamed to sd.cpp's internal names and
//     converted to the types ggml computes with, streamed into one ggml
//     buffer;
//   - model.go: Load and Generate (conditioning, the sampling loop with
//     classifier-free guidance, the VAE), calling a family's conditioner,
//     network and schedule through the registries;
//   - sampler.go, schedule.go, rng.go: samplers (Euler, Euler a, DPM++ 2M),
//     parameterisations (eps, v, flow), the Schedule interface with the
//     discrete, karras, simple and sgm_uniform spacings, and sd.cpp's noise
//     generators;
//   - model_types.go, params.go, image.go: requests and results, the A1111
//     "parameters" text of an image, and conversions between images and the
//     VAE's tensors;
//   - graph_ops.go: the building blocks of the graphs (linear, conv, norms,
//     attention);
//   - imatrix_collect.go, imatrix_graph.go: importance-matrix collection
//     during generation.
//
// The parts come next, one file per component: graph_clip.go and
// cond_clip.go are the CLIP text encoders and the conditioning of the CLIP
// families (SD 1.x/2.x, SDXL with its size vector); graph_unet.go and
// net_unet.go the LDM UNet; graph_vae.go the KL VAE; model_config.go reads
// their configuration from a checkpoint's shapes. Flux.1 is family_flux.go
// (its table entries), flux_config.go (the MMDiT's configuration),
// graph_flux.go and net_flux.go (the MMDiT and its patch layout),
// cond_flux.go (CLIP-L's pooled output and T5's context; graph_t5.go and
// cond_t5.go are the T5 encoder) and schedule_flux.go (flow sigmas and
// sd-cli's flux schedule). A family plugs in with an
// entry in Families and, for new architectures, a conditioner, a network
// and a schedule registered from init (see family.go).
//
// Beside it: text (tokenizers and prompt weights), infer/metrics (PSNR,
// SSIM, tensor differences) and infer/pngtext (PNG text chunks). infer
// imports formats, names, quant, native, text and the dequantizer;
// only cmd/sdtool imports infer. Without cgo it builds unchanged, Available
// is false and Load returns ErrNoCgo.
package infer
