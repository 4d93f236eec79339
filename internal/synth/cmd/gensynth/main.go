// Command gensynth writes synthetic checkpoints. Without arguments it
// regenerates testdata/tiny-sd1.safetensors (run it from the repository
// root); with -arch it writes any architecture the generator knows:
//
//	go run ./internal/synth/cmd/gensynth
//	go run ./internal/synth/cmd/gensynth -arch flux -scale 0.0625 -depth 2 -o flux-small.gguf
//
// It also writes testdata/tiny-sd1.imatrix.dat, a synthetic importance matrix
// for the tiny model's linear layers (-imatrix "" skips it).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/quant/imatrix"
)

func main() {
	arch := flag.String("arch", "", "architecture ("+strings.Join(synth.Archs(), ", ")+"); empty: regenerate the tiny SD1 test model")
	scale := flag.Float64("scale", 0, "width multiplier of the diffusion model (0: real size)")
	textScale := flag.Float64("text-scale", 0, "width multiplier of the text encoders (0: -scale)")
	vaeScale := flag.Float64("vae-scale", 0, "width multiplier of the VAE (0: -scale)")
	depth := flag.Int("depth", 0, "cap on repeated blocks (0: real counts)")
	seed := flag.Int64("seed", 1, "data seed")
	dtype := flag.String("dtype", "f16", "storage type: f32, f16 or bf16")
	out := flag.String("o", "testdata/tiny-sd1.safetensors", "output file (.gguf or .safetensors)")
	imat := flag.String("imatrix", "testdata/tiny-sd1.imatrix.dat", "also write a synthetic legacy imatrix for the model here (\"\": none)")
	flag.Parse()

	spec := synth.TinySD1
	if *arch != "" {
		dt, ok := formats.ParseType(*dtype)
		if !ok {
			fail(fmt.Errorf("unknown dtype %q", *dtype))
		}
		spec = synth.Spec{Arch: *arch, Scale: *scale, TextScale: *textScale, VAEScale: *vaeScale,
			Depth: *depth, Seed: *seed, DType: dt}
	}
	if err := synth.Write(*out, spec); err != nil {
		fail(err)
	}
	if *imat != "" {
		m, err := synth.Imatrix(spec, 4)
		if err != nil {
			fail(err)
		}
		f, err := os.Create(*imat)
		if err != nil {
			fail(err)
		}
		if err := imatrix.WriteDat(f, m); err != nil {
			fail(err)
		}
		if err := f.Close(); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gensynth:", err)
	os.Exit(1)
}
