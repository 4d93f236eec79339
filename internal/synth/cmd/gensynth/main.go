package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// presets are the runnable SD models -sd names.
var presets = map[string]synth.SD{"tiny": synth.TinySD, "sd15": synth.FullSD15}

func main() {
	arch := flag.String("arch", "", "architecture ("+strings.Join(synth.Archs(), ", ")+")")
	sd := flag.String("sd", "", "runnable SD preset: tiny (testdata/tiny-sd1.gguf) or sd15 (SD 1.5's full size)")
	q := flag.String("quant", "", "with -sd: type of the linear weights (q8_0, q4_K, ...)")
	scale := flag.Float64("scale", 0, "width multiplier of the diffusion model (0: real size)")
	textScale := flag.Float64("text-scale", 0, "width multiplier of the text encoders (0: -scale)")
	vaeScale := flag.Float64("vae-scale", 0, "width multiplier of the VAE (0: -scale)")
	depth := flag.Int("depth", 0, "cap on repeated blocks (0: real counts)")
	seed := flag.Int64("seed", 1, "data seed")
	dtype := flag.String("dtype", "f16", "storage type: f32, f16 or bf16")
	out := flag.String("o", "", "output file (.gguf or .safetensors; -sd writes GGUF)")
	imat := flag.String("imatrix", "", "with -arch: also write a synthetic legacy imatrix for the model here")
	flag.Parse()

	switch {
	case *arch != "" && *sd != "":
		fail(errors.New("-arch and -sd exclude each other"))
	case *sd != "":
		c, ok := presets[*sd]
		if !ok {
			fail(fmt.Errorf("unknown -sd preset %q (want tiny or sd15)", *sd))
		}
		if *q != "" {
			t, ok := formats.ParseType(*q)
			if !ok {
				fail(fmt.Errorf("unknown type %q", *q))
			}
			c.Quant = t
		}
		if *out == "" {
			fail(errors.New("-sd needs -o OUT.gguf"))
		}
		check(c.Write(*out))
	case *arch != "":
		dt, ok := formats.ParseType(*dtype)
		if !ok {
			fail(fmt.Errorf("unknown dtype %q", *dtype))
		}
		if *out == "" {
			fail(errors.New("-arch needs -o OUT.gguf or OUT.safetensors"))
		}
		spec := synth.Spec{Arch: *arch, Scale: *scale, TextScale: *textScale, VAEScale: *vaeScale, Depth: *depth, Seed: *seed, DType: dt}
		check(synth.Write(*out, spec))
		if *imat != "" {
			check(writeImatrix(*imat, spec))
		}
	default:
		check(synth.Write("testdata/tiny-sd1.safetensors", synth.TinySD1))
		check(writeImatrix("testdata/tiny-sd1.imatrix.dat", synth.TinySD1))
		check(synth.TinySD.Write("testdata/tiny-sd1.gguf"))
	}
}

// writeImatrix writes spec's synthetic importance matrix (4 calls) to path.
func writeImatrix(path string, spec synth.Spec) error {
	m, err := synth.Imatrix(spec, 4)
	if err != nil {
		return err
	}
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		_, err := imatrix.Encode(w, path, m)
		return err
	})
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gensynth:", err)
	os.Exit(1)
}
