// Command sdtool inspects, converts and quantizes the weights of diffusion
// models (Stable Diffusion 1.x/2.x/XL, SD3, Flux, Wan, Qwen-Image, Z-Image
// and their text encoders and VAEs) in GGUF and safetensors files.
//
// Each subcommand lives in its own file and registers itself from init;
// cli.go holds what they share: flags after positional arguments, -v for
// debug logging, examples in every help, and "sdtool: message" errors with
// exit status 1.
package main

import (
	"os"

	// File formats that formats.Open detects.
	_ "github.com/sdtool/sdtool/formats/ckpt"
	_ "github.com/sdtool/sdtool/formats/diffusers"
	_ "github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	// ggml-backed quantizers for the grid IQ types (with cgo; empty without).
	_ "github.com/sdtool/sdtool/native/codecs"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}
