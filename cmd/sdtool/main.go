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
