package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
	"github.com/sdtool/sdtool/report"
)

// reportPrompts are the fixed prompts of a report; seeds are 1, 2, ...
var reportPrompts = []string{"a photograph of a cat sitting on a wooden table", "a lighthouse on a rocky coast at dusk, oil painting"}

func init() {
	register(&cli.Command{
		Name:      "report",
		Usage:     "render a ladder's files and its source with fixed prompts and seeds into one self-contained HTML report",
		ArgsUsage: "MANIFEST -o REPORT.html | SOURCE FILE... -o REPORT.html",
		Description: "Reads the manifest.json a ladder wrote (sdtool quantize IN --type A,B,... -o 'DIR/NAME-{type}.{ext}'),\n" +
			"or takes a source model and the files to judge, and generates the same prompts and seeds with the\n" +
			"source (the manifest's source, or -m) and with every file\n" +
			"of the ladder through generate's engine, and writes one HTML file that needs nothing else to be read (no\n" +
			"script, no network): the images side by side with an amplified difference map under each, PSNR and\n" +
			"SSIM per file, a chart of PSNR against file size, the relative error of every denoiser block's output\n" +
			"at the first step and of the worst weights (as sdtool diff measures them). Then it records each file's\n" +
			"mean PSNR and SSIM as \"quality\" in the manifest, if one was read (docs/ladder-manifest.md). The prompts are fixed\n" +
			"(--prompt replaces them) and prompt i gets seed --seed+i, so two reports of two ladders compare.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the report `FILE` (.html)"},
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "the source model `FILE`", DefaultText: "the manifest's source"},
			&cli.StringSliceFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "`PROMPT` to render (repeatable)", DefaultText: "two fixed prompts"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "`SEED` of the first prompt; prompt i gets SEED+i"},
			&cli.IntFlag{Name: "steps", Value: 4, Usage: "sampling `STEPS`"},
			&cli.IntFlag{Name: "width", Aliases: []string{"W"}, Usage: "image width in `PIXELS`", DefaultText: "model metadata, else the family's"},
			&cli.IntFlag{Name: "height", Aliases: []string{"H"}, Usage: "image height in `PIXELS`", DefaultText: "model metadata, else the family's"},
			&cli.Float64Flag{Name: "gain", Value: report.DefaultGain, Usage: "`FACTOR` the difference maps amplify by"},
			&cli.StringFlag{Name: "tokenizer", Usage: "CLIP BPE merges `FILE` (default: found as generate finds it)"},
			threadsFlag("`N` ggml threads"),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing report"},
		},
		Action: runReport,
	},
		"sdtool report testdata/tiny-sd1.safetensors testdata/tiny-sd1.gguf -o report.html -p 'a cat' --steps 1 -W 64 -H 64",
	)
}

// reportModel is one model of the report: the source or a ladder file.
type reportModel struct {
	path   string
	images []image.Image
	blocks []infer.BlockOutput // first prompt's, at step 1
	nan    int                 // NaN values decoded, over all prompts
}

func runReport(c *cli.Context) error {
	if !infer.Available {
		return fmt.Errorf("report: %w", infer.ErrNoCgo)
	}
	out := c.String("output")
	if out == "" || filepath.Ext(out) != ".html" {
		return fmt.Errorf("report: give -o REPORT.html (got %q)", out)
	}
	var man *quantize.Manifest
	var manPath, dir string
	switch {
	case c.NArg() == 1 && filepath.Ext(c.Args().First()) == ".json":
		manPath = c.Args().First()
		m, err := quantize.ReadManifest(manPath)
		if err != nil {
			return err
		}
		man, dir = m, filepath.Dir(manPath)
	case c.NArg() >= 2:
		if c.String("model") != "" {
			return errors.New("report: -m names the source of a manifest; with files, the first one is the source")
		}
		man = &quantize.Manifest{Source: quantize.ManifestSource{File: c.Args().First()}}
		for _, f := range c.Args().Slice()[1:] {
			st, err := os.Stat(f)
			if err != nil {
				return err
			}
			man.Files = append(man.Files, quantize.ManifestFile{File: f, Type: filepath.Base(f), Size: st.Size()})
		}
	default:
		return fmt.Errorf("report: want a manifest.json, or a source model and the files to compare with it; got %s (see sdtool report --help)", pipeline.Count(c.NArg(), "argument", "arguments"))
	}
	src := c.String("model")
	if src == "" {
		src = man.Source.File
		if _, err := os.Stat(src); err != nil && !filepath.IsAbs(src) {
			// A manifest moved with its files: try the source beside it.
			if _, err2 := os.Stat(filepath.Join(dir, src)); err2 == nil {
				src = filepath.Join(dir, src)
			}
		}
	}
	inputs := []string{src}
	if manPath != "" {
		inputs = append(inputs, manPath)
	}
	for _, f := range man.Files {
		inputs = append(inputs, filepath.Join(dir, filepath.FromSlash(f.File)))
	}
	if err := pipeline.CheckOutput(out, inputs, c.Bool("force")); err != nil {
		return err
	}
	prompts := c.StringSlice("prompt")
	if len(prompts) == 0 {
		prompts = reportPrompts
	}
	threads, err := ggmlThreads(c)
	if err != nil {
		return err
	}
	ctx, stop := console.SignalContext()
	defer stop()
	gen := func(path string) (*reportModel, error) {
		comps := infer.Components{"model": path}
		tok, _, notFound := resolveTokenizer(c.String("tokenizer"), comps)
		m, err := infer.Load(comps, infer.LoadOptions{Tokenizers: map[string]string{"clip": tok}, Threads: threads})
		if err != nil {
			if notFound != nil {
				return nil, notFound
			}
			return nil, err
		}
		defer m.Close()
		def := m.Family.Defaults
		rm := &reportModel{path: path}
		for i, p := range prompts {
			req := infer.Request{Prompt: p, Width: pick(c.Int("width"), m.Config.DefaultWidth, def.Width),
				Height: pick(c.Int("height"), m.Config.DefaultHeight, def.Height), Steps: c.Int("steps"),
				CFGScale: def.CFGScale, Guidance: def.Guidance, Seed: uint64(c.Int64("seed") + int64(i)),
				Method: def.Method, Scheduler: def.Scheduler, CaptureBlocks: i == 0, Context: ctx}
			res, err := generateWithBar(c.App.ErrWriter, m, req, filepath.Base(path))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			warnNaN(c, path, res)
			rm.nan += res.NaNPixels
			img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
			if err != nil {
				return nil, err
			}
			rm.images = append(rm.images, img)
			if i == 0 {
				rm.blocks = res.Blocks
			}
		}
		return rm, nil
	}
	ref, err := gen(src)
	if err != nil {
		return err
	}
	if ref.nan > 0 {
		// A quantized file may break (its images then show it), the reference may not.
		return fmt.Errorf("%s: the source decodes to NaN values, so it cannot be the reference", src)
	}
	rep := &report.Report{Title: "Quantization report: " + filepath.Base(src), Source: filepath.Base(src), Gain: c.Float64("gain"),
		Settings: fmt.Sprintf("%s, %dx%d, seeds from %d, the model family's sampler and CFG scale.",
			pipeline.Count(c.Int("steps"), "step", "steps"), ref.images[0].Bounds().Dx(), ref.images[0].Bounds().Dy(), c.Int64("seed"))}
	if st, err := os.Stat(src); err == nil {
		rep.SourceSize = st.Size()
	}
	for i, p := range prompts {
		rep.Prompts = append(rep.Prompts, report.Prompt{Text: p, Seed: uint64(c.Int64("seed") + int64(i)), Image: ref.images[i]})
	}
	for i, f := range man.Files {
		path := filepath.Join(dir, filepath.FromSlash(f.File))
		got, err := gen(path)
		if err != nil {
			return err
		}
		rf := report.File{Name: f.File, Type: f.Type, Size: f.Size, BitsPerWeight: f.BitsPerWeight}
		var psnr, ssim float64
		for k, img := range got.images {
			s := report.Shot{Image: img}
			if s.PSNR, err = metrics.PSNR(ref.images[k], img); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if s.SSIM, err = metrics.SSIM(ref.images[k], img); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			psnr += s.PSNR
			ssim += s.SSIM
			rf.Images = append(rf.Images, s)
		}
		rf.Blocks = blockErrors(ref.blocks, got.blocks)
		if rf.Tensors, err = tensorErrors(ctx, src, path); err != nil {
			return err
		}
		rep.Files = append(rep.Files, rf)
		rel, _ := filepath.Rel(dir, out)
		if rel == "" {
			rel = out
		}
		man.Files[i].Quality = &quantize.Quality{PSNR: psnr / float64(len(got.images)), SSIM: ssim / float64(len(got.images)),
			Images: len(got.images), Report: filepath.ToSlash(rel)}
		fmt.Fprintf(c.App.ErrWriter, "%s: PSNR %.2f dB, SSIM %.4f\n", f.File, man.Files[i].Quality.PSNR, man.Files[i].Quality.SSIM)
	}
	var page bytes.Buffer
	if err := report.Write(&page, rep); err != nil {
		return err
	}
	err = pipeline.WriteAtomic(ctx, out, pipeline.PublishOptions{Force: c.Bool("force"), Inputs: inputs, Logger: slog.Default()},
		func(w io.Writer) error { _, err := w.Write(page.Bytes()); return err })
	if err != nil {
		return err
	}
	if manPath == "" {
		fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", out)
		return nil
	}
	// The manifest is the document this run completes: it is replaced in place.
	var files []string
	for _, f := range man.Files {
		files = append(files, filepath.Join(dir, filepath.FromSlash(f.File)))
	}
	if err := quantize.WriteManifest(ctx, manPath, man, pipeline.PublishOptions{Force: true, Inputs: append(files, src)}); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s; quality recorded in %s\n", out, manPath)
	return nil
}

// blockErrors compares each block output of got with the reference's.
func blockErrors(ref, got []infer.BlockOutput) []report.Bar {
	byName := map[string][]float32{}
	for _, b := range ref {
		byName[b.Name] = b.Values
	}
	var out []report.Bar
	for _, b := range got {
		rv, ok := byName[b.Name]
		if !ok {
			continue
		}
		if e, err := metrics.CompareTensors(rv, b.Values); err == nil {
			out = append(out, report.Bar{Name: b.Name, Value: e.RelRMSE})
		}
	}
	return out
}

// tensorErrors measures every tensor of file against the source, as sdtool diff does.
func tensorErrors(ctx context.Context, src, file string) ([]report.Bar, error) {
	a, err := formats.Open(src)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	b, err := formats.Open(file)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	d, err := inspect.Diff(a, b, inspect.DiffOptions{Context: ctx})
	if err != nil {
		if errors.Is(err, pipeline.ErrInterrupted) {
			return nil, err
		}
		return nil, fmt.Errorf("comparing %s with %s: %w", file, src, err)
	}
	var out []report.Bar
	for _, t := range d.Tensors {
		if t.RelError != nil && *t.RelError > 0 {
			out = append(out, report.Bar{Name: t.Name, Value: *t.RelError})
		}
	}
	return out, nil
}
