// Command sdtool inspects, converts and quantizes the weights of diffusion
// models (Stable Diffusion 1.x/2.x/XL, SD3, Flux, Wan, Qwen-Image, Z-Image
// and their text encoders and VAEs) in GGUF and safetensors files.
//
// Each subcommand lives in its own file and registers itself from init;
// cli.go holds what they share: flags after positional arguments, -v for
// debug logging at every depth, examples in every help, flag errors in
// sdtool's words, and "sdtool: message" errors with exit status 1. write.go
// has the writing commands' --threads and --max-memory; cpucheck.go refuses a
// CPU the linked ggml was not compiled for; threads.go, slowbuild.go and
// tokenizer.go are generate's default thread count, its note about a build
// without SIMD kernels (`go run ./build` makes one with them), and where its
// CLIP tokenizer comes from.
//
// On the map (docs/design.md) the command is the top floor: flags become
// options, options become a plan (convert, quantize, merge) or a summary
// (inspect), and the plan runs through package pipeline with the progress
// bars and signal handling of cmd/sdtool/internal/console. It does no file
// I/O of its own beyond reading a prompt file and an init image: outputs go
// through the pipeline's atomic publish. The format packages and the
// ggml-backed codecs are linked in with blank imports.
package main
