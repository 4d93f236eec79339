package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// presets are the runnable SD models -sd names.
var presets = map[string]synth.SD{"tiny": synth.TinySD, "tiny-sdxl": synth.TinySDXL, "sd15": synth.FullSD15}

func main() {
	err := run(os.Args[1:], os.Stderr)
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // -help asked for the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gensynth:", err)
		os.Exit(1)
	}
}

// errUsage is returned, after the usage, for a run without anything to do.
var errUsage = errors.New("nothing to write")

// run is gensynth with its arguments; usage goes to stderr, and so does a
// line for every file written.
func run(args []string, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("gensynth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	arch := fs.String("arch", "", "architecture ("+strings.Join(synth.Archs(), ", ")+")")
	sd := fs.String("sd", "", "runnable SD preset: tiny (testdata/tiny-sd1.gguf and .safetensors), tiny-sdxl (testdata/tiny-sdxl.gguf) or sd15 (SD 1.5's full size)")
	q := fs.String("quant", "", "with -sd: type of the linear weights (q8_0, q4_K, ...)")
	scale := fs.Float64("scale", 0, "width multiplier of the diffusion model (0: real size)")
	textScale := fs.Float64("text-scale", 0, "width multiplier of the text encoders (0: -scale)")
	vaeScale := fs.Float64("vae-scale", 0, "width multiplier of the VAE (0: -scale)")
	depth := fs.Int("depth", 0, "cap on repeated blocks (0: real counts)")
	seed := fs.Int64("seed", 1, "data seed")
	dtype := fs.String("dtype", "f16", "storage type: f32, f16 or bf16")
	out := fs.String("o", "", "output file (.gguf or .safetensors)")
	imat := fs.String("imatrix", "", "with -arch: also write a synthetic legacy imatrix for the model here")
	testdata := fs.String("testdata", "", "write the committed test files (tiny-*.gguf and the others in testdata/ that the generator makes) into `DIR`")
	force := fs.Bool("force", false, "replace existing files")
	fluxBench := fs.Bool("flux-bench", false, "write synth.FluxBench (a runnable Flux layout with realistic weight statistics) to -o")
	parts := fs.String("parts", "", "write a full-size model's component files (z-image-turbo) into the folder -o")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := checkLayoutFlags(fs, *arch); err != nil {
		return err
	}
	// Refuse every existing output before writing any, so that a run
	// without -force never leaves the committed files half replaced.
	outputs := []string{*out, *imat}
	if *testdata != "" {
		outputs = testdataFiles(*testdata)
	}
	if *parts != "" {
		outputs = fullPartFiles(*parts, *out)
	}
	defer func() {
		if err == nil {
			err = reportWritten(stderr, outputs)
		}
	}()
	if !*force {
		for _, o := range outputs {
			if _, err := os.Stat(o); o != "" && err == nil {
				return fmt.Errorf("%s exists (pass -force to replace it)", o)
			}
		}
	}

	switch {
	case *testdata != "" && (*arch != "" || *sd != "" || *out != ""):
		return errors.New("-testdata writes the committed files; it takes no -arch, -sd or -o")
	case *testdata != "":
		for _, f := range committed {
			if err := f.write(*testdata); err != nil {
				return err
			}
		}
		return nil
	case *parts != "" && *out == "":
		return errors.New("-parts needs -o DIR")
	case *parts != "":
		return writeFullParts(*parts, *out)
	case *fluxBench:
		if *out == "" {
			return errors.New("-flux-bench needs -o OUT.gguf or OUT.safetensors")
		}
		return synth.FluxBench.WriteSingle(*out)
	case *arch != "" && *sd != "":
		return errors.New("-arch and -sd exclude each other")
	case *sd != "":
		c, ok := presets[*sd]
		if !ok {
			return fmt.Errorf("unknown -sd preset %q (want tiny, tiny-sdxl or sd15)", *sd)
		}
		if *q != "" {
			t, ok := formats.ParseType(*q)
			if !ok {
				return fmt.Errorf("unknown type %q", *q)
			}
			c.Quant = t
		}
		if *out == "" {
			return errors.New("-sd needs -o OUT.gguf")
		}
		return c.Write(*out)
	case *arch != "":
		dt, ok := formats.ParseType(*dtype)
		if !ok {
			return fmt.Errorf("unknown dtype %q", *dtype)
		}
		if *out == "" {
			return errors.New("-arch needs -o OUT.gguf or OUT.safetensors")
		}
		spec := synth.Spec{Arch: *arch, Scale: *scale, TextScale: *textScale, VAEScale: *vaeScale, Depth: *depth, Seed: *seed, DType: dt}
		if err := synth.Write(*out, spec); err != nil {
			return err
		}
		if *imat != "" {
			return writeImatrix(*imat, spec)
		}
		return nil
	default:
		fs.Usage()
		return errUsage
	}
}

// checkLayoutFlags refuses the size flags with a family layout
// (layout-*), whose widths and depths are fixed, instead of ignoring them.
func checkLayoutFlags(fs *flag.FlagSet, arch string) error {
	if !strings.HasPrefix(arch, "layout-") {
		return nil
	}
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "scale", "text-scale", "vae-scale", "depth":
			set = append(set, "-"+f.Name)
		}
	})
	if len(set) > 0 {
		return fmt.Errorf("-arch %s is a fixed small layout: %s do not apply to it (they scale the other architectures)", arch, strings.Join(set, ", "))
	}
	return nil
}

// fullParts are the full-size models -parts writes as component files.
var fullParts = map[string]synth.ZImage{"z-image-turbo": synth.ZImageTurbo}

// writeFullParts writes the component files of the full-size model name
// into the folder dir as NAME-FLAG.gguf; each tensor is generated as it is
// written, so memory stays small whatever the model's size.
func writeFullParts(name, dir string) error {
	m, ok := fullParts[name]
	if !ok {
		return fmt.Errorf("unknown -parts model %q (want z-image-turbo)", name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err := m.WriteParts(dir, name, "gguf")
	return err
}

// fullPartFiles are the files -parts name writes into dir.
func fullPartFiles(name, dir string) []string {
	var files []string
	for _, flag := range synth.ZImageParts {
		files = append(files, filepath.Join(dir, name+"-"+flag+".gguf"))
	}
	return files
}

// committedFile is one model of the committed test data: the files it is
// (a model as its component files is several) and how -testdata writes them.
type committedFile struct {
	names []string
	write func(dir string) error
}

// single is a committed model written as one file by write.
func single(name string, write func(path string) error) committedFile {
	return committedFile{names: []string{name}, write: func(dir string) error { return write(filepath.Join(dir, name)) }}
}

// committed lists the files -testdata writes, in order.
var committed = []committedFile{
	single("tiny-sd1.gguf", synth.TinySD.Write),
	single("tiny-sd1.safetensors", synth.TinySD.Write),
	single("tiny-sd1.imatrix.dat", func(path string) error { return writeMatrix(path, synth.TinySD.Imatrix(4)) }),
	single("tiny-sdxl.gguf", synth.TinySDXL.Write),
	single("tiny-flux.gguf", synth.TinyFlux.WriteSingle),
	single("tiny-chroma.gguf", synth.TinyChroma.WriteSingle),
	single("tiny-sd3.gguf", synth.TinySD3.WriteSingle),
	single("tiny-wan.gguf", synth.TinyWan.WriteSingle),
	single("tiny-flux2-klein.gguf", synth.TinyKlein.WriteSingle),
	single("tiny-flux2-dev.gguf", synth.TinyDev.WriteSingle),
	{names: []string{"tiny-qwen-image-diffusion-model.gguf", "tiny-qwen-image-llm.gguf", "tiny-qwen-image-vae.safetensors"},
		write: func(dir string) error {
			_, err := synth.TinyQwenImage.WriteParts(dir, "tiny-qwen-image", "gguf")
			return err
		}},
	{names: []string{"tiny-z-image-diffusion-model.gguf", "tiny-z-image-llm.gguf", "tiny-z-image-vae.gguf"},
		write: func(dir string) error {
			_, err := synth.TinyZImage.WriteParts(dir, "tiny-z-image", "gguf")
			return err
		}},
}

// testdataFiles are the committed files -testdata writes, in DIR.
func testdataFiles(dir string) []string {
	var files []string
	for _, f := range committed {
		for _, n := range f.names {
			files = append(files, filepath.Join(dir, n))
		}
	}
	return files
}

// writeImatrix writes spec's synthetic importance matrix (4 calls) to path.
func writeImatrix(path string, spec synth.Spec) error {
	m, err := synth.Imatrix(spec, 4)
	if err != nil {
		return err
	}
	return writeMatrix(path, m)
}

// writeMatrix writes m to path (.gguf or legacy .dat by extension).
func writeMatrix(path string, m *imatrix.Matrix) error {
	return pipeline.WriteAtomic(context.Background(), path, pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		_, err := imatrix.Encode(w, path, m)
		return err
	})
}

// reportWritten says on stderr what was written: one line per file with
// its size (a file that a run does not write, such as an unset -imatrix,
// is left out).
func reportWritten(stderr io.Writer, files []string) error {
	for _, f := range files {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s (%s)\n", f, pipeline.HumanBytes(st.Size()))
	}
	return nil
}
