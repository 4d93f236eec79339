// Package infer is the core of sdtool's diffusion engine: it loads a
// model's weights into ggml (through package native) and generates images
// and videos with them, for generate and for collecting importance
// matrices.
//
// The core names no family (TestCoreNamesNoFamily holds it for every
// non-test file of this package):
//
//   - family.go: the engine's family entries (Family: markers, text
//     encoders, conditioning-vector layout, VAE kind and latent format,
//     sd-cli's defaults) and the registries the entries name:
//     conditioners, networks, schedules; model_config.go: ModelConfig (a
//     NetworkConfig, a list of EncoderConfig, a VAEConfig) and the
//     registries of network detectors, text encoder kinds and VAE kinds;
//   - load.go, load_ggml.go: the component files (Components, keyed by the
//     flags of package family's input table), which weights the graphs
//     read, renamed to sd.cpp's internal names and converted to the types
//     ggml computes with; stream.go, stream_order.go: the weight pager;
//   - model.go: Load and Generate (conditioning, the sampling loop with
//     classifier-free guidance, the VAE), calling the parts through the
//     registries and the interfaces they implement (Conditioner, Network);
//   - sampler.go, schedule.go, schedule_discrete_flow.go, rng.go: samplers,
//     parameterisations, the Schedule interface with the discrete and
//     shifted flow schedules and the shared spacings, and sd.cpp's noise
//     generators;
//   - model_types.go, params.go, image.go, video.go, video_encode.go:
//     requests and results, the A1111 "parameters" text, conversions
//     between images and the VAE's tensors, video frames;
//   - graph_ops.go, w8a8.go: the graph builder (Builder) and its building
//     blocks (linear, conv, norms, attention; INT8 modules as W8A8), which
//     the parts' graphs use; prompt_weights.go, shapes_check.go: helpers
//     the conditioners and detectors share;
//   - imatrix_collect.go, imatrix_graph.go: importance-matrix collection.
//
// The parts are packages that import this one and register themselves from
// init: the families under infer/arch, the text encoder kinds under
// infer/encoder, the VAE kinds under infer/vae; infer/families imports them
// all, and a program that generates imports it. docs/design.md says what a
// new family adds.
//
// Beside it: infer/metrics (PSNR, SSIM, tensor differences), infer/pngtext
// (PNG text chunks) and infer/avi; the tokenizers are package text.
// Without cgo it builds unchanged, Available is false and Load returns
// ErrNoCgo.
package infer
