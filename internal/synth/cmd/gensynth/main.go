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
	o, fs, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// Refuse every existing output before writing any, so that a run
	// without -force never leaves the committed files half replaced.
	outputs := o.outputs()
	defer func() {
		if err == nil {
			err = reportWritten(stderr, outputs)
		}
	}()
	if !o.force {
		for _, out := range outputs {
			if _, err := os.Stat(out); out != "" && err == nil {
				return fmt.Errorf("%s exists (pass -force to replace it)", out)
			}
		}
	}
	switch {
	case o.testdata != "" && (o.arch != "" || o.sd != "" || o.out != ""):
		return errors.New("-testdata writes the committed files; it takes no -arch, -sd or -o")
	case o.testdata != "":
		for _, f := range committed {
			if err := f.write(o.testdata); err != nil {
				return err
			}
		}
		return nil
	case o.parts != "" && o.out == "":
		return errors.New("-parts needs -o DIR")
	case o.parts != "":
		return writeFullParts(o.parts, o.out)
	case o.fluxBench:
		if o.out == "" {
			return errors.New("-flux-bench needs -o OUT.gguf or OUT.safetensors")
		}
		return synth.FluxBench.WriteSingle(o.out)
	case o.arch != "" && o.sd != "":
		return errors.New("-arch and -sd exclude each other")
	case o.sd != "":
		return o.writeSD()
	case o.arch != "":
		return o.writeArch()
	}
	fs.Usage()
	return errUsage
}

// options are gensynth's flags.
type options struct {
	arch, sd, quant, dtype, out, imatrix, testdata, parts string
	scale, textScale, vaeScale                            float64
	depth                                                 int
	seed                                                  int64
	force, fluxBench                                      bool
}

// parseFlags reads gensynth's flags.
func parseFlags(args []string, stderr io.Writer) (*options, *flag.FlagSet, error) {
	var o options
	fs := flag.NewFlagSet("gensynth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.arch, "arch", "", "architecture ("+strings.Join(synth.Archs(), ", ")+")")
	fs.StringVar(&o.sd, "sd", "", "runnable SD preset: tiny (testdata/tiny-sd1.gguf and .safetensors), tiny-sdxl (testdata/tiny-sdxl.gguf) or sd15 (SD 1.5's full size)")
	fs.StringVar(&o.quant, "quant", "", "with -sd: type of the linear weights (q8_0, q4_K, ...)")
	fs.Float64Var(&o.scale, "scale", 0, "width multiplier of the diffusion model (0: real size)")
	fs.Float64Var(&o.textScale, "text-scale", 0, "width multiplier of the text encoders (0: -scale)")
	fs.Float64Var(&o.vaeScale, "vae-scale", 0, "width multiplier of the VAE (0: -scale)")
	fs.IntVar(&o.depth, "depth", 0, "cap on repeated blocks (0: real counts)")
	fs.Int64Var(&o.seed, "seed", 1, "data seed")
	fs.StringVar(&o.dtype, "dtype", "f16", "storage type: f32, f16 or bf16")
	fs.StringVar(&o.out, "o", "", "output file (.gguf or .safetensors)")
	fs.StringVar(&o.imatrix, "imatrix", "", "with -arch: also write a synthetic legacy imatrix for the model here")
	fs.StringVar(&o.testdata, "testdata", "", "write the committed test files (tiny-*.gguf and the others in testdata/ that the generator makes) into `DIR`")
	fs.BoolVar(&o.force, "force", false, "replace existing files")
	fs.BoolVar(&o.fluxBench, "flux-bench", false, "write synth.FluxBench (a runnable Flux layout with realistic weight statistics) to -o")
	fs.StringVar(&o.parts, "parts", "", "write a full-size model's component files (z-image-turbo) into the folder -o")
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return &o, fs, checkLayoutFlags(fs, o.arch)
}

// outputs are the files this run writes.
func (o *options) outputs() []string {
	switch {
	case o.testdata != "":
		return testdataFiles(o.testdata)
	case o.parts != "":
		return fullPartFiles(o.parts, o.out)
	}
	return []string{o.out, o.imatrix}
}

// writeSD writes a runnable SD preset.
func (o *options) writeSD() error {
	c, ok := presets[o.sd]
	if !ok {
		return fmt.Errorf("unknown -sd preset %q (want tiny, tiny-sdxl or sd15)", o.sd)
	}
	if o.quant != "" {
		t, ok := formats.ParseType(o.quant)
		if !ok {
			return fmt.Errorf("unknown type %q", o.quant)
		}
		c.Quant = t
	}
	if o.out == "" {
		return errors.New("-sd needs -o OUT.gguf")
	}
	return c.Write(o.out)
}

// writeArch writes a layout of -arch (and its imatrix with -imatrix).
func (o *options) writeArch() error {
	dt, ok := formats.ParseType(o.dtype)
	if !ok {
		return fmt.Errorf("unknown dtype %q", o.dtype)
	}
	if o.out == "" {
		return errors.New("-arch needs -o OUT.gguf or OUT.safetensors")
	}
	spec := synth.Spec{Arch: o.arch, Scale: o.scale, TextScale: o.textScale, VAEScale: o.vaeScale, Depth: o.depth, Seed: o.seed, DType: dt}
	if err := synth.Write(o.out, spec); err != nil {
		return err
	}
	if o.imatrix != "" {
		return writeImatrix(o.imatrix, spec)
	}
	return nil
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
	single("tiny-wan-ti2v.gguf", synth.TinyWanTI2V.WriteSingle),
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
