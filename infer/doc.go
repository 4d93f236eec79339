// Package infer is sdtool's diffusion engine: it loads a model's weights
// into ggml (through package native) and generates images with them, for
// generate and for collecting importance matrices.
//
// The engine core is family-independent:
//
//   - load.go, load_ggml.go: which weights the graphs read, renamed to
//     sd.cpp's names and converted to the types ggml computes with;
//   - sampler.go, schedule.go, rng.go: samplers (Euler, Euler a, DPM++ 2M...),
//     the noise schedule and sigma spacings, and sd.cpp's noise generators;
//   - model_types.go, params.go, image.go: requests and results, the A1111
//     "parameters" text of an image, and conversions between images and the
//     VAE's tensors;
//   - graph_ops.go: the building blocks of the graphs (linear, conv, norms,
//     attention);
//   - imatrix_collect.go, imatrix_graph.go: importance-matrix collection
//     during generation.
//
// The architectures come next, one file per component and per family:
// graph_clip.go, graph_unet.go and graph_vae.go are the CLIP text encoder,
// the LDM UNet and the KL VAE; model_config.go reads their configuration
// from a checkpoint's shapes; model_sd.go is the SD 1.x/2.x family (Load,
// text encoding, Generate).
//
// Beside it: infer/text (tokenizers and prompt weights), infer/metrics (PSNR,
// SSIM, tensor differences) and infer/pngtext (PNG text chunks). infer
// imports formats, names, quant, native, infer/text and the dequantizer;
// only cmd/sdtool imports infer. Without cgo it builds unchanged, Available
// is false and Load returns ErrNoCgo.
package infer
