package qwenimage

// The text encoder and VAE kinds this package's family entries name, registered
// by importing them, so that loading one of its models finds them.
import (
	_ "github.com/sdtool/sdtool/infer/encoder/llm"
	_ "github.com/sdtool/sdtool/infer/vae/wan"
)
