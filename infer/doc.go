// Package infer is sdtool's diffusion engine: it loads a model's weights
// into ggml (through package native) and generates images with them, for
// generate and for collecting importance matrices.
//
// The package is a core and plug-ins. The core names no family (a test,
// TestCoreNamesNoFamily, holds it for the files listed in core_test.go):
//
//   - family.go: the engine's family entries (Family: markers, text
//     encoders, conditioning-vector layout, VAE kind and latent format,
//     sd-cli's defaults) and the registries the entries name: conditioners,
//     networks, schedules; model_config.go: ModelConfig (a NetworkConfig,
//     a list of EncoderConfig, a VAEConfig) and the registries of network
//     detectors, text encoder kinds and VAE kinds;
//   - load.go, load_ggml.go: the component files (Components, keyed by the
//     flags of package family's input table), which weights the graphs
//     read, renamed to sd.cpp's internal names and converted to the types
//     ggml computes with, streamed into one ggml buffer;
//   - model.go: Load and Generate (conditioning, the sampling loop with
//     classifier-free guidance, the VAE), calling the parts through the
//     registries;
//   - sampler.go, schedule.go, rng.go: samplers (Euler, Euler a, DPM++ 2M),
//     parameterisations (eps, v, flow), the Schedule interface with the
//     discrete, karras, simple and sgm_uniform spacings, and sd.cpp's noise
//     generators;
//   - model_types.go, params.go, image.go: requests and results, the A1111
//     "parameters" text of an image, and conversions between images and the
//     VAE's tensors;
//   - graph_ops.go, w8a8.go: the building blocks of the graphs (linear,
//     conv, norms, attention; INT8 modules as W8A8);
//   - imatrix_collect.go, imatrix_graph.go: importance-matrix collection
//     during generation.
//
// The plug-ins register themselves from init, by the names the entries use:
//
//   - SD 1.x/2.x/XL: family_sd.go (entries), unet_config.go, graph_unet.go,
//     net_unet.go (the LDM UNet, network "unet") and cond_clip.go (CLIP
//     conditioning with SDXL's size vector, conditioner "clip");
//   - Flux.1: family_flux.go, flux_config.go, graph_flux.go, net_flux.go
//     (the MMDiT, network "flux"), cond_flux.go (conditioner "flux") and
//     schedule_flux.go (flow sigmas, schedule and scheduler "flux");
//   - text encoder kinds: clip_config.go and graph_clip.go ("clip", with
//     its tokenizer loader), t5_config.go, graph_t5.go and cond_t5.go
//     ("t5"), llm_config.go and graph_llm.go ("llm": Qwen3 and
//     Qwen2.5-VL's text model, which conditioners read through
//     EncodeLLMPrompt with their LLMPrompt);
//   - VAE kinds: graph_vae.go ("kl", the LDM AutoencoderKL).
//
// A new family adds its own files of these kinds and a row in package
// family's table; docs/design.md lists them, and the step after this one:
// the plug-ins as packages of their own (infer/arch, infer/encoder,
// infer/vae).
//
// Beside it: infer/metrics (PSNR, SSIM, tensor differences) and
// infer/pngtext (PNG text chunks); the tokenizers are package text. infer
// imports formats, family, names, quant, native, text and the dequantizer;
// only cmd/sdtool imports infer. Without cgo it builds unchanged, Available
// is false and Load returns ErrNoCgo.
package infer
