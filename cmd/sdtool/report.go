package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/cmd/sdtool/internal/refcache"
	"github.com/sdtool/sdtool/family"
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
		ArgsUsage: "MANIFEST -o REPORT.html | SOURCE FILE... -o REPORT.html | SOURCE --type A,B,... -o REPORT.html [--clip_l FILE --t5xxl FILE --llm FILE --vae FILE ...]",
		Description: "Reads the manifest.json a ladder wrote (sdtool quantize IN --type A,B,... -o 'DIR/NAME-{type}.{ext}'),\n" +
			"or takes a source model and the files to judge, and generates the same prompts and seeds with the\n" +
			"source (the manifest's source, or -m) and with every file\n" +
			"of the ladder through generate's engine, and writes one HTML file that needs nothing else to be read (no\n" +
			"script, no network): the images side by side with an amplified difference map under each, PSNR and\n" +
			"SSIM per file, a chart of PSNR against file size, the relative error of every denoiser block's output\n" +
			"at the first step and of the worst weights (as sdtool diff measures them). Then it records each file's\n" +
			"mean PSNR and SSIM as \"quality\" in the manifest, if one was read (docs/ladder-manifest.md). The prompts are fixed\n" +
			"(--prompt replaces them) and prompt i gets seed --seed+i, so two reports of two ladders compare.\n" +
			"A file that cannot be loaded, rendered or compared keeps its row, marked failed with the reason (and\n" +
			"\"quality\": {\"error\": ...} in the manifest); the others are reported, and the command exits 1 after\n" +
			"writing the report. Tokenizers are found as generate finds them (--tokenizer, --t5-tokenizer, --llm-tokenizer).\n\n" +
			"A ladder of a model released as separate files (Flux, SD3, Wan, Qwen-Image, Z-Image) is a ladder of its\n" +
			"diffusion model: give the source and every file as diffusion models alone and the parts they share with\n" +
			"generate's flags (--clip_l, --clip_g, --t5xxl, --llm, --vae, --high-noise-diffusion-model). Each file that\n" +
			"holds a diffusion model alone is rendered as generate --diffusion-model FILE with those parts; any other\n" +
			"file is a whole model whose parts they replace, as with generate -m.\n\n" +
			"With --type A,B,... and only a source, report judges types before any file exists: it quantizes the\n" +
			"source to each type in turn (as quantize --type would, with --imatrix), writes the file beside the\n" +
			"report while it renders and measures it, and removes it before the next, so a ladder of a model\n" +
			"larger than the free disk can be judged one rung at a time. Every type is planned before anything\n" +
			"renders, so a type the source cannot take is refused first.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the report `FILE` (.html)"},
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "the source model `FILE`", DefaultText: "the manifest's source"},
			&cli.StringSliceFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "`PROMPT` to render (repeatable)", DefaultText: "two fixed prompts"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "`SEED` of the first prompt; prompt i gets SEED+i"},
			&cli.IntFlag{Name: "steps", Value: 4, Usage: "sampling `STEPS`"},
			&cli.IntFlag{Name: "width", Aliases: []string{"W"}, Usage: "image width in `PIXELS`", DefaultText: "model metadata, else the family's"},
			&cli.IntFlag{Name: "height", Aliases: []string{"H"}, Usage: "image height in `PIXELS`", DefaultText: "model metadata, else the family's"},
			&cli.Float64Flag{Name: "gain", Value: report.DefaultGain, Usage: "`FACTOR` the difference maps amplify by"},
			&cli.StringFlag{Name: "tokenizer", Usage: "CLIP BPE merges `FILE` (default: found as generate finds it)"},
			&cli.StringFlag{Name: "t5-tokenizer", Usage: "T5 tokenizer `PATH` (Flux): spiece.model, its tokenizer.json, or a folder holding one", DefaultText: "one embedded in each file's metadata; without one only an empty prompt encodes"},
			&cli.StringFlag{Name: "llm-tokenizer", Usage: "LLM tokenizer `PATH` (Z-Image, Qwen-Image, Flux.2): tokenizer.json, tekken.json, vocab.json with merges.txt, or a folder holding one", DefaultText: "one embedded in the --llm file's GGUF metadata"},
			&cli.IntFlag{Name: "video-frames", Usage: "`FRAMES` a video model renders, shown side by side", DefaultText: "the family's: 5 for Wan"},
			threadsFlag("`N` ggml threads"),
			renderMemoryFlag(),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing report"},
		}, append(append(reportPartFlags(), reportTypeFlags()...), referenceCacheFlags()...)...),
		Action: runReport,
	},
		"sdtool report testdata/tiny-sd1.safetensors testdata/tiny-sd1.gguf -o out/report.html -p 'a cat' --steps 1 -W 64 -H 64",
		"sdtool report testdata/tiny-sd1.safetensors --type q8_0,q4_K -o out/types-report.html -p 'a cat' --steps 1 -W 64 -H 64",
		"sdtool report testdata/tiny-qwen-image-diffusion-model.gguf testdata/tiny-qwen-image-diffusion-model.gguf --llm testdata/tiny-qwen-image-llm.gguf --vae testdata/tiny-qwen-image-vae.safetensors -o out/qwen-report.html -p 'a cat' --steps 1 -W 64 -H 64",
	)
}

// reportPartFlags are generate's flags of the parts a diffusion model
// alone runs with (the input table's rows that do not name the model),
// which the source and every file of a report share.
func reportPartFlags() []cli.Flag {
	var out []cli.Flag
	for _, in := range family.GenerateInputs() {
		if in.Primary || in.Whole() {
			continue
		}
		out = append(out, &cli.StringFlag{Name: in.Flag, Usage: "standalone " + in.What + " `FILE` that the source and every file run with"})
	}
	return out
}

// reportParts reads the part flags into components by flag.
func reportParts(c *cli.Context) infer.Components {
	out := infer.Components{}
	for _, in := range family.GenerateInputs() {
		if v := c.String(in.Flag); v != "" && !in.Primary && !in.Whole() {
			out[in.Flag] = v
		}
	}
	return out
}

// reportModel is one model of the report: the source or a ladder file.
type reportModel struct {
	path   string
	images []image.Image
	blocks []infer.BlockOutput // first prompt's, at step 1
	nan    int                 // NaN values decoded, over all prompts
}

// bytes is what the model's renders hold in memory.
func (rm *reportModel) bytes() int64 {
	n := imageBytes(rm.images)
	for _, b := range rm.blocks {
		n += 4 * int64(len(b.Values))
	}
	return n
}

func runReport(c *cli.Context) error {
	if !infer.Available {
		return fmt.Errorf("report: %w", infer.ErrNoCgo)
	}
	out := c.String("output")
	if out == "" || filepath.Ext(out) != ".html" {
		return fmt.Errorf("report: give -o REPORT.html (got %q)", out)
	}
	threads, err := ggmlThreads(c)
	if err != nil {
		return err
	}
	var (
		man          *quantize.Manifest
		manPath, dir string
		types        *typeLadder
	)
	if c.String("type") != "" {
		dir = filepath.Dir(out)
		types, man, err = planTypeLadder(c, c.Args().First(), dir, threads)
		if err == nil {
			defer types.l.Close()
		}
	} else {
		man, manPath, dir, err = reportManifest(c)
	}
	if err != nil {
		return err
	}
	src := reportSource(c, man, dir)
	parts := reportParts(c)
	inputs, err := checkReportFiles(c, out, src, parts, man, manPath, dir, types)
	if err != nil {
		return err
	}
	// The parts are checked against the source before anything renders:
	// every file of a ladder of diffusion models needs the same ones.
	if _, err := modelOf(src, parts); err != nil {
		return err
	}
	prompts := c.StringSlice("prompt")
	if len(prompts) == 0 {
		prompts = reportPrompts
	}
	if err := checkPrompts("--prompt", prompts...); err != nil {
		return err
	}
	ctx, stop := console.SignalContext()
	defer stop()
	// A bad --max-memory is refused before anything renders.
	if _, err := memoryBudget(c); err != nil {
		return err
	}
	rc, err := referenceCache(c)
	if err != nil {
		return err
	}
	run := &reportRun{c: c, ctx: ctx, prompts: prompts, threads: threads, src: src, parts: parts, types: types}
	ref, err := run.renderSource(rc, src)
	if err != nil {
		return err
	}
	if ref.nan > 0 {
		// A quantized file may break (its images then show it), the reference may not.
		return fmt.Errorf("%s: the source decodes to NaN values, so it cannot be the reference", src)
	}
	run.held = ref.bytes()
	rep := run.newReport(ref)
	failed, err := run.measureAll(ref, rep, man, dir, out)
	if err != nil {
		return err
	}
	if err := writeReport(ctx, c, out, inputs, rep, man, manPath, dir, src); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("report: %s of %d could not be reported; their rows in %s say why", pipeline.Count(failed, "file", "files"), len(man.Files), out)
	}
	return nil
}

// reportManifest reads the manifest report was given, or makes one of a
// source model and the files to compare with it; dir is where the files'
// names are relative to (the manifest's own folder, through links).
func reportManifest(c *cli.Context) (man *quantize.Manifest, manPath, dir string, err error) {
	switch {
	case c.NArg() == 1 && filepath.Ext(c.Args().First()) == ".json":
		manPath = c.Args().First()
		if man, err = quantize.ReadManifest(manPath); err != nil {
			return nil, "", "", err
		}
		// The files lie beside the manifest itself, not beside a link to it.
		real := manPath
		if r, err := filepath.EvalSymlinks(manPath); err == nil {
			real = r
		}
		return man, manPath, filepath.Dir(real), nil
	case c.NArg() >= 2:
		if c.String("model") != "" {
			return nil, "", "", errors.New("report: -m names the source of a manifest; with files, the first one is the source")
		}
		man = &quantize.Manifest{Source: quantize.ManifestSource{File: c.Args().First()}}
		for _, f := range c.Args().Slice()[1:] {
			mf, err := describeFile(f)
			if err != nil {
				return nil, "", "", err
			}
			man.Files = append(man.Files, mf)
		}
		return man, "", "", nil
	}
	return nil, "", "", fmt.Errorf("report: want a manifest.json, or a source model and the files to compare with it; got %s (see sdtool report --help)", pipeline.Count(c.NArg(), "argument", "arguments"))
}

// reportSource is the model the files are compared with: -m, or the
// manifest's source (beside the manifest when it moved with its files).
func reportSource(c *cli.Context, man *quantize.Manifest, dir string) string {
	if src := c.String("model"); src != "" {
		return src
	}
	src := man.Source.File
	if _, err := os.Stat(src); err != nil && !filepath.IsAbs(src) {
		if _, err2 := os.Stat(filepath.Join(dir, src)); err2 == nil {
			return filepath.Join(dir, src)
		}
	}
	return src
}

// checkReportFiles checks the report's output against every file it reads
// (and the manifest, which is rewritten in place, for being writable), and
// returns those inputs.
func checkReportFiles(c *cli.Context, out, src string, parts infer.Components, man *quantize.Manifest, manPath, dir string, types *typeLadder) ([]string, error) {
	inputs := append([]string{src}, componentPaths(parts)...)
	if manPath != "" {
		inputs = append(inputs, manPath)
	}
	if types == nil {
		for _, f := range man.Files {
			inputs = append(inputs, filepath.Join(dir, filepath.FromSlash(f.File)))
		}
	}
	if err := pipeline.CheckOutput(out, inputs, c.Bool("force")); err != nil {
		return nil, err
	}
	if types != nil {
		// The rungs written for the report are outputs too: none may be an input.
		if err := checkWritten(c, inputs, types.paths()...); err != nil {
			return nil, err
		}
	}
	if manPath != "" {
		if err := pipeline.CheckWritable(manPath); err != nil {
			return nil, err
		}
	}
	return inputs, nil
}

// newReport starts the report with the source's renders.
func (r *reportRun) newReport(ref *reportModel) *report.Report {
	c, src := r.c, r.src
	rep := &report.Report{Title: "Quantization report: " + filepath.Base(src), Source: filepath.Base(src), Gain: c.Float64("gain"),
		Settings: fmt.Sprintf("%s, %dx%d, seeds from %d, the model family's sampler and CFG scale.",
			pipeline.Count(c.Int("steps"), "step", "steps"), ref.images[0].Bounds().Dx(), ref.images[0].Bounds().Dy(), c.Int64("seed"))}
	if st, err := os.Stat(src); err == nil {
		rep.SourceSize = st.Size()
	}
	var shared []string
	for _, f := range r.parts.Files() {
		flag, path, _ := strings.Cut(f, "=")
		shared = append(shared, "--"+flag+" "+filepath.Base(path))
	}
	if len(shared) > 0 {
		rep.Settings += " Every file runs with the same " + strings.Join(shared, ", ") + "."
	}
	if r.types != nil {
		rep.Settings += " Each file was quantized from the source for this report (--type) and removed once measured."
	}
	for i, p := range r.prompts {
		rep.Prompts = append(rep.Prompts, report.Prompt{Text: p, Seed: uint64(c.Int64("seed") + int64(i)), Image: ref.images[i]})
	}
	return rep
}

// measureAll renders and measures every file of the manifest into rep and
// the manifest's quality entries. A file that fails is counted and keeps
// a row saying why; an interruption stops the report.
func (r *reportRun) measureAll(ref *reportModel, rep *report.Report, man *quantize.Manifest, dir, out string) (failed int, err error) {
	rel, _ := filepath.Rel(dir, out)
	if rel == "" {
		rel = out
	}
	w := r.c.App.ErrWriter
	for i := range man.Files {
		rf, q, err := r.measureFile(ref, man, i, dir)
		f := man.Files[i]
		switch {
		case err != nil && (r.ctx.Err() != nil || errors.Is(err, infer.ErrInterrupted) || errors.Is(err, pipeline.ErrInterrupted)):
			return failed, err
		case err != nil:
			// One broken rung must not cost the report of the others.
			failed++
			rf.Error, q = err.Error(), &quantize.Quality{Error: err.Error()}
			fmt.Fprintf(w, "%s: failed: %v\n", f.File, err)
		case math.IsInf(q.PSNR, 1):
			fmt.Fprintf(w, "%s: identical to the source's images\n", f.File)
		default:
			fmt.Fprintf(w, "%s: PSNR %.2f dB, SSIM %.4f\n", f.File, q.PSNR, q.SSIM)
		}
		q.Report = filepath.ToSlash(rel)
		rep.Files = append(rep.Files, rf)
		man.Files[i].Quality = q
	}
	return failed, nil
}

// reportRun holds what every rendering of a report shares.
type reportRun struct {
	c       *cli.Context
	ctx     context.Context
	prompts []string
	threads int
	src     string
	parts   infer.Components // the shared parts (--clip_l, --vae, ...)
	held    int64            // the source's renders, kept while the files render
	// keep, when not nil, receives each render of the model being rendered.
	keep func(i int, res *infer.Result)
	// types, when not nil, writes each file from the source as it is measured (--type).
	types *typeLadder
}

// measureFile measures file i of the manifest: a file on disk, or a --type
// rung written for the measurement and removed after it.
func (r *reportRun) measureFile(ref *reportModel, man *quantize.Manifest, i int, dir string) (report.File, *quantize.Quality, error) {
	f := man.Files[i]
	if r.types == nil {
		return r.measure(ref, filepath.Join(dir, filepath.FromSlash(f.File)), f)
	}
	path, mf, remove, err := r.writeRung(i)
	man.Files[i] = mf
	if remove != nil {
		defer remove()
	}
	if err != nil {
		return report.File{Name: mf.File, Type: mf.Type}, nil, err
	}
	return r.measure(ref, path, mf)
}

// renderSource renders the source, or takes its renders from the
// reference cache (rc, nil when off), storing them there when rendered.
func (r *reportRun) renderSource(rc *refcache.Cache, path string) (*reportModel, error) {
	comps, err := modelOf(path, r.parts)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(r.prompts))
	for i := range r.prompts {
		keys[i] = renderKey(rc, componentPaths(comps), r.settings(i))
	}
	if rm, ok := r.cached(rc, path, keys); ok {
		fmt.Fprintf(r.c.App.ErrWriter, "%s: the source's renders come from the reference cache\n", path)
		return rm, nil
	}
	r.keep = func(i int, res *infer.Result) { putReference(r.ctx, r.c, rc, keys[i], res) }
	defer func() { r.keep = nil }()
	return r.render(path)
}

// modelOf is the model report renders for one of its files: a diffusion
// model alone as --diffusion-model beside the shared parts, any other file
// as -m, whose parts they replace. A diffusion model whose family needs a
// part that no flag names is refused with the flags to give.
func modelOf(path string, parts infer.Components) (infer.Components, error) {
	comps := infer.Components{}
	for k, v := range parts {
		comps[k] = v
	}
	title, needs, alone := aloneNeeds(path)
	if !alone {
		comps[family.FlagModel] = path
		return comps, nil
	}
	comps[flagDiffusion] = path
	if missing := absentParts(needs, comps); len(missing) > 0 {
		return nil, fmt.Errorf("%s is a %s diffusion model alone (no text encoders, no VAE): give report the parts it runs with: %s",
			path, title, strings.Join(missing, " "))
	}
	return comps, nil
}

// settings is what changes the render of prompt i (the report's flags).
func (r *reportRun) settings(i int) string {
	c := r.c
	return fmt.Sprintf("report %q seed=%d steps=%d %dx%d blocks=%v tokenizer=%s t5=%s llm=%s parts=%v", r.prompts[i], c.Int64("seed")+int64(i),
		c.Int("steps"), c.Int("width"), c.Int("height"), i == 0, c.String("tokenizer"), c.String("t5-tokenizer"), c.String("llm-tokenizer"), r.parts.Files())
}

// cached returns the source's renders when the cache holds every prompt's.
func (r *reportRun) cached(rc *refcache.Cache, path string, keys []string) (*reportModel, bool) {
	rm := &reportModel{path: path}
	for i, key := range keys {
		if key == "" {
			return nil, false
		}
		res, ok := rc.Get(key)
		if !ok {
			return nil, false
		}
		img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
		if err != nil {
			return nil, false
		}
		rm.images = append(rm.images, img)
		rm.nan += res.NaNPixels
		if i == 0 {
			rm.blocks = res.Blocks
		}
	}
	return rm, true
}

// render loads the model at path and renders every prompt with it.
func (r *reportRun) render(path string) (*reportModel, error) {
	c := r.c
	comps, err := modelOf(path, r.parts)
	if err != nil {
		return nil, err
	}
	tok, _, notFound := resolveTokenizer(c.String("tokenizer"), comps)
	// The default budget follows the memory available as each file loads.
	budget, err := memoryBudget(c)
	if err != nil {
		return nil, err
	}
	m, err := infer.Load(comps, infer.LoadOptions{Tokenizers: map[string]string{"clip": tok, "t5": c.String("t5-tokenizer"), "llm": c.String("llm-tokenizer")},
		Threads: r.threads, MaxMemory: budget, Held: r.held, Rebudget: rebudget(c), VAEDecodeOnly: true})
	if err != nil {
		if notFound != nil {
			return nil, notFound
		}
		return nil, budgetHint(err)
	}
	defer m.Close()
	def := m.Family.Defaults
	rm := &reportModel{path: path}
	for i, p := range r.prompts {
		req := infer.Request{Prompt: p, Width: pick(c.Int("width"), m.Config.DefaultWidth, def.Width),
			Height: pick(c.Int("height"), m.Config.DefaultHeight, def.Height), Steps: c.Int("steps"),
			CFGScale: def.CFGScale, Guidance: def.Guidance, Seed: uint64(c.Int64("seed") + int64(i)),
			Method: def.Method, Scheduler: def.Scheduler, CaptureBlocks: i == 0, Context: r.ctx}
		req.Frames = m.Family.VAE.VideoFrames(pick(c.Int("video-frames"), 0, def.Frames))
		res, err := generateWithBar(c.App.ErrWriter, m, req, filepath.Base(path))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, budgetHint(err))
		}
		warnNaN(c, path, res)
		if r.keep != nil {
			r.keep(i, res)
		}
		rm.nan += res.NaNPixels
		img, err := filmstrip(res)
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

// measure renders the ladder file f at path and compares it with the
// source's images and weights. On error the returned row still names the file.
func (r *reportRun) measure(ref *reportModel, path string, f quantize.ManifestFile) (report.File, *quantize.Quality, error) {
	rf := report.File{Name: f.File, Type: f.Type, Size: f.Size, BitsPerWeight: f.BitsPerWeight}
	got, err := r.render(path)
	if err != nil {
		return rf, nil, err
	}
	var psnr, ssim float64
	for k, img := range got.images {
		s := report.Shot{Image: img}
		if s.PSNR, err = metrics.PSNR(ref.images[k], img); err != nil {
			return rf, nil, fmt.Errorf("%s: %w", path, err)
		}
		if s.SSIM, err = metrics.SSIM(ref.images[k], img); err != nil {
			return rf, nil, fmt.Errorf("%s: %w", path, err)
		}
		psnr += s.PSNR
		ssim += s.SSIM
		rf.Images = append(rf.Images, s)
	}
	rf.Blocks = blockErrors(ref.blocks, got.blocks)
	if rf.Tensors, err = tensorErrors(r.ctx, r.src, path); err != nil {
		rf.Images = nil
		return rf, nil, err
	}
	n := float64(len(got.images))
	return rf, &quantize.Quality{PSNR: psnr / n, SSIM: ssim / n, Images: len(got.images)}, nil
}

// writeReport writes the HTML page and, when the report was of a manifest,
// records the quality of each file in it.
func writeReport(ctx context.Context, c *cli.Context, out string, inputs []string, rep *report.Report, man *quantize.Manifest, manPath, dir, src string) error {
	var page bytes.Buffer
	if err := report.Write(&page, rep); err != nil {
		return err
	}
	// The manifest is encoded before the page is written, so that a run
	// writes both or neither.
	var manBytes []byte
	var err error
	if manPath != "" {
		if manBytes, err = quantize.EncodeManifest(man); err != nil {
			return fmt.Errorf("%s: %w", manPath, err)
		}
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
	// A manifest reached through a link is replaced where it lies, and the link stays.
	target := manPath
	if t, err := filepath.EvalSymlinks(manPath); err == nil {
		target = t
	}
	err = pipeline.WriteAtomic(ctx, target, pipeline.PublishOptions{Force: true, Inputs: append(files, src)},
		func(w io.Writer) error { _, err := w.Write(manBytes); return err })
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s; quality recorded in %s\n", out, manPath)
	return nil
}

// describeFile gives a file named on report's command line what a ladder's
// manifest gives its files: the size, the type that holds most of its
// weights (a ComfyUI module format, else the largest quantized type, else
// the largest type) and the bits per weight (data bytes over elements).
// A file that exists but cannot be read is left to fail its row.
func describeFile(path string) (quantize.ManifestFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return quantize.ManifestFile{}, fmt.Errorf("report: %w", err)
	}
	mf := quantize.ManifestFile{File: path, Size: st.Size()}
	m, err := formats.Open(path)
	if err != nil {
		return mf, nil
	}
	defer m.Close()
	sum, err := inspect.Summarize(m, inspect.Options{NoTensors: true})
	if err != nil {
		return mf, nil
	}
	if sum.ParamCount > 0 {
		mf.BitsPerWeight = float64(8*sum.TotalBytes) / float64(sum.ParamCount)
	}
	mf.Type = fileType(sum)
	return mf, nil
}

// fileType names the type that holds most of a model's weights.
func fileType(sum *inspect.Summary) string {
	for _, q := range sum.ComfyQuant {
		if q.Format != "" {
			return q.Format
		}
	}
	var best inspect.TypeStat
	for _, t := range sum.Types {
		if d, ok := formats.ParseType(t.Type); ok && d.Quantized() && t.Bytes > best.Bytes {
			best = t
		}
	}
	if best.Type == "" && len(sum.Types) > 0 {
		best = slices.MaxFunc(sum.Types, func(a, b inspect.TypeStat) int { return cmp.Compare(a.Bytes, b.Bytes) })
	}
	return best.Type
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
