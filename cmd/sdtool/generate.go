package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/png" // init images
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	_ "github.com/sdtool/sdtool/infer/families" // every family generate runs registers itself
	"github.com/sdtool/sdtool/infer/metrics"
	"github.com/sdtool/sdtool/infer/pngtext"
	"github.com/sdtool/sdtool/internal/procmem"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/text"
)

// generate runs the families of infer.Families through ggml. Without cgo
// the command exists but says that the binary cannot run models
// (infer.Available is false).

// familyTitles lists the engine entries generate runs, for help texts.
func familyTitles() []string {
	var out []string
	for _, f := range infer.Entries() {
		out = append(out, f.Title)
	}
	return out
}

// familyDefaults describes one of the families' defaults for a flag's
// help ("the family's: 7 for SD 1.x, SDXL; 1 for Flux.1 dev"), leaving
// out the families whose value is "0" (none).
func familyDefaults(value func(infer.Defaults) string) string {
	var order []string
	by := map[string][]string{}
	for _, f := range infer.Entries() {
		v := value(f.Defaults)
		if v == "0" || v == "" {
			continue
		}
		if by[v] == nil {
			order = append(order, v)
		}
		by[v] = append(by[v], f.Title)
	}
	parts := make([]string, len(order))
	for i, v := range order {
		parts[i] = v + " for " + strings.Join(by[v], ", ")
	}
	return "the family's: " + strings.Join(parts, "; ")
}

// schedulerList names the schedulers for --scheduler's help.
func schedulerList() string {
	var names []string
	for _, s := range infer.Schedulers() {
		names = append(names, string(s))
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// generateUsage is the help text of a model-file flag of generate.
func generateUsage(in *family.Input) string {
	if in.Whole() {
		return "whole model `FILE` (one file with LDM/ComfyUI/diffusers names, or a diffusers folder)"
	}
	return "standalone " + in.What + " `FILE` replacing the model's"
}

// modelFlags are the input table's flags generate takes and, named
// "compare-FLAG" (--compare for the whole model), the reference model's.
func modelFlags() []cli.Flag {
	var out []cli.Flag
	for _, in := range family.GenerateInputs() {
		fl := &cli.StringFlag{Name: in.Flag, Usage: generateUsage(in)}
		if in.Alias != "" {
			fl.Aliases = []string{in.Alias}
		}
		out = append(out, fl)
	}
	for _, in := range family.GenerateInputs() {
		name, usage := compareFlag(in), "reference "+strings.TrimPrefix(generateUsage(in), "whole ")
		if in.Whole() {
			usage = "reference model `FILE` to compare with (same seed); unset reference components default to the model's"
		}
		out = append(out, &cli.StringFlag{Name: name, Usage: usage})
	}
	return out
}

// compareFlag names the flag of the reference model's file for in.
func compareFlag(in *family.Input) string {
	if in.Whole() {
		return "compare"
	}
	return "compare-" + in.Flag
}

// components reads the model flags (reference false) or the reference
// model's (true), whose unset parts default to the model's.
func components(c *cli.Context, reference bool) infer.Components {
	out := infer.Components{}
	for _, in := range family.GenerateInputs() {
		name := in.Flag
		if reference {
			name = compareFlag(in)
		}
		if v := c.String(name); v != "" {
			out[in.Flag] = v
		}
	}
	return out
}

// comparing reports whether any reference flag is set.
func comparing(c *cli.Context) bool {
	return !components(c, true).Empty()
}

func init() {
	register(&cli.Command{
		Name:      "generate",
		Usage:     "generate an image with an " + strings.Join(familyTitles(), ", ") + " model (ggml CPU kernels) and optionally compare two weight sets",
		ArgsUsage: "-m MODEL | --diffusion-model FILE --clip_l FILE ... -p PROMPT -o OUT.png",
		Description: "Runs the text encoders, the diffusion network (configuration detected from tensor shapes) and the VAE with\n" +
			"ggml's CPU kernels, the same kernels stable-diffusion.cpp uses, on any file sdtool reads (GGUF of any ggml type,\n" +
			"safetensors, .ckpt, diffusers folders, ComfyUI INT8/FP8). The model is one file (-m) or separate components as\n" +
			"sd-cli names them (--diffusion-model, --clip_l, --clip_g, --t5xxl, --vae), in any mix of formats and types; the\n" +
			"family (" + strings.Join(familyTitles(), ", ") + ") is detected from the tensors. The PNG gets A1111-style \"parameters\" text.\n\n" +
			"--compare REF runs the same seed with REF's weights and prints the PSNR and SSIM of the two images, the\n" +
			"cosine similarity of the final latents and each network block's output error at the first step, so a\n" +
			"quantized model can be checked against its source; --compare-diffusion-model, --compare-clip_l, ... name\n" +
			"reference components, and reference parts left unset are the model's own. Width, height and steps default\n" +
			"to the model's sdtool.generate.* metadata, else sd-cli's 512x512 and 20; the sampler, scheduler and CFG scale\n" +
			"default to sd-cli's choice for the family. --imatrix-out collects an importance matrix of the diffusion\n" +
			"network's and text encoders' linear weights (Σx² per input column, as sd-cli --imat-out; not the VAE, not\n" +
			"convolutions) for `convert --imatrix` and `quantize --imatrix`; --prompt-file runs a calibration set in one\n" +
			"command. The CLIP tokenizer comes from --tokenizer, else a component's metadata, else the first found beside\n" +
			"the model, in its diffusers folder's tokenizer/, in the comfy/sd1_tokenizer of a ComfyUI install the model is\n" +
			"in, or in the Hugging Face cache (openai/clip-vit-large-patch14, the SD pipelines); generate says which.\n" +
			"-M vid_gen renders a video with a video family (Wan): --video-frames frames, written as one Motion-JPEG .avi or\n" +
			"as PNG frames named by a printf index (-o 'out_%03d.png'); --compare then measures every frame and the clip.\n" +
			"A plain `go build` leaves ggml's SIMD kernels out (about 15x slower on a real model): build with\n" +
			"`go run ./build` in the repository, which sets the compiler flags for this CPU. --threads defaults to\n" +
			"the idle cores (ggml's spinning workers collapse on busy ones).",
		Flags: append(append(modelFlags(), []cli.Flag{
			&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "`PROMPT` (sd-cli's weights: (word:1.2), (word), [word], \\( for a literal bracket, BREAK; or --prompt-file)"},
			&cli.StringFlag{Name: "negative-prompt", Aliases: []string{"n"}, Usage: "negative `PROMPT`"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "output.png", Usage: "output `FILE` (.png; sd-cli's default name)"},
			&cli.IntFlag{Name: "steps", Usage: "sampling `STEPS`", DefaultText: "model metadata, else 20"},
			&cli.Float64Flag{Name: "cfg-scale", Usage: "classifier-free guidance `SCALE` (1 skips the negative pass)", DefaultText: familyDefaults(func(d infer.Defaults) string { return fmt.Sprint(d.CFGScale) })},
			&cli.Float64Flag{Name: "guidance", Usage: "distilled guidance `SCALE` of models with a guidance input", DefaultText: familyDefaults(func(d infer.Defaults) string { return fmt.Sprint(d.Guidance) })},
			&cli.IntFlag{Name: "width", Aliases: []string{"W"}, Usage: "image width in `PIXELS`", DefaultText: "model metadata, else 512"},
			&cli.IntFlag{Name: "height", Aliases: []string{"H"}, Usage: "image height in `PIXELS`", DefaultText: "model metadata, else 512"},
			&cli.Int64Flag{Name: "seed", Aliases: []string{"s"}, Value: 42, Usage: "noise `SEED`"},
			&cli.StringFlag{Name: "sampling-method", Usage: "`SAMPLER`: euler, euler_a or dpm++2m", DefaultText: familyDefaults(func(d infer.Defaults) string { return string(d.Method) })},
			&cli.StringFlag{Name: "scheduler", Usage: "`SCHEDULE`: " + schedulerList(), DefaultText: familyDefaults(func(d infer.Defaults) string { return string(d.Scheduler) })},
			&cli.StringFlag{Name: "rng", Value: "cuda", Usage: "noise `RNG`: cuda (sd.cpp's default, PyTorch CUDA randn) or cpu"},
			&cli.StringFlag{Name: "prediction", Usage: "prediction `TYPE`: eps, v or flow", DefaultText: "metadata, else the family's; SD 2.x is probed as sd.cpp does"},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "ggml `THREADS`" + threadsBound, DefaultText: "the idle cores: all, less the other threads running when generate starts"},
			&cli.StringFlag{Name: "runtime", Value: infer.RuntimeSDCPP, Usage: "`RUNTIME` whose arithmetic to reproduce where the runtimes differ: sdcpp (stable-diffusion.cpp: FP8 modules without their weight_scale, an OpenCLIP text_projection as stored, which transposes SDXL's pooled embedding from single files) or comfyui (FP8 weight_scale applied, text_projection as trained, asym_w4a8_int8 modules widened to their INT8 grid and run as W8A8, convrot_w4a4 modules with int4 activations); INT8 modules run as W8A8 in both; nvfp4 and mxfp8 modules are dequantized, as ComfyUI on CPU does"},
			&cli.StringFlag{Name: "model-args", Usage: "sd-cli's model args, `KEY=VALUE[,KEY=VALUE...]`: Chroma's chroma_use_dit_mask (default true), chroma_use_t5_mask (false) and chroma_t5_mask_pad (1); models that do not read a key ignore it, as sd-cli does"},
			&cli.StringFlag{Name: "tokenizer", Usage: "CLIP tokenizer `PATH`: tokenizer.json, merges.txt, or a folder with vocab.json and merges.txt", DefaultText: "a component's own, else one found beside the model, in its diffusers folder, a ComfyUI install or the Hugging Face cache"},
			&cli.StringFlag{Name: "t5-tokenizer", Usage: "T5 tokenizer `PATH` (Flux): spiece.model, its tokenizer.json, or a folder holding one", DefaultText: "one embedded in a component's GGUF metadata; without one only an empty or blank prompt encodes (T5 sees </s> alone)"},
			&cli.StringFlag{Name: "llm-tokenizer", Usage: "LLM tokenizer `PATH` (Z-Image, Qwen-Image, Flux.2): the LLM's tokenizer.json, Mistral's tekken.json, vocab.json with merges.txt, or a folder holding one", DefaultText: "one embedded in the --llm file's GGUF metadata (llama.cpp's GGUFs carry theirs)"},
			&cli.StringFlag{Name: "init-img", Aliases: []string{"i"}, Usage: "init image `FILE` (PNG) for img2img, or the first frame of a video (-M vid_gen with Wan 2.2 TI2V-5B)"},
			&cli.StringSliceFlag{Name: "ref-image", Aliases: []string{"r"}, Usage: "reference image `FILE` (PNG) for Flux.2's edit mode (repeatable); the size defaults to the first one's"},
			&cli.Float64Flag{Name: "strength", Value: 0.75, Usage: "img2img denoising `STRENGTH` in (0, 1] (image-to-video ignores it, as sd-cli does)"},
			&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
			&cli.BoolFlag{Name: "json", Usage: "with --compare: print the comparison as JSON on stdout, one object per image (docs/compare-json.md)"},
			renderMemoryFlag(),
		}...), append(append(generateImatrixFlags(), referenceCacheFlags()...), videoFlags()...)...),
		Action: runGenerate,
	},
		"sdtool generate -m testdata/tiny-sd1.gguf -p 'a cat' -o out/cat.png",
		"sdtool generate -m testdata/tiny-sd1.gguf -p 'a (red:1.3) house' -n blurry --steps 2 --sampling-method dpm++2m --scheduler karras -o out/house.png --threads 1",
		"sdtool generate -m testdata/tiny-sd1.gguf -p 'a cat' --steps 1 -W 64 -H 64 -o out/calib.png --imatrix-out out/calib.dat --force",
		"sdtool generate -m testdata/tiny-sd1.gguf -p 'a red house' --steps 1 -W 64 -H 64 -o out/calib.png --imatrix-in out/calib.dat --imatrix-out out/calib.dat --force",
		"sdtool generate -m testdata/tiny-sd1.safetensors -p 'a cat' --steps 1 -W 64 -H 64 -o out/cmp.png --compare testdata/tiny-sd1.gguf --json",
		"sdtool generate -m testdata/tiny-sdxl.gguf -p 'a photo of a (red:1.2) cat' -n blurry -o out/cat-xl.png --force",
		"sdtool generate -m testdata/tiny-sdxl.gguf -p 'a cat' --steps 2 --scheduler sgm_uniform -W 64 -H 64 -o out/cat-xl.png --compare testdata/tiny-sdxl.gguf --runtime comfyui --force",
		"sdtool generate -m testdata/tiny-sdxl.gguf -p 'a cat' --steps 1 -W 64 -H 64 -o out/xl-calib.png --imatrix-out out/xl-calib.dat --force",
		"sdtool generate -m testdata/tiny-flux.gguf -p 'a photo of a cat' --steps 2 -W 64 -H 64 -o out/cat-flux.png --force",
		"sdtool generate -m testdata/tiny-flux.gguf -p 'a cat' --steps 1 -W 64 -H 64 --guidance 5 -o out/flux-cmp.png --compare testdata/tiny-flux.gguf --force",
		"sdtool generate -m testdata/tiny-flux.gguf -p 'a cat' --steps 1 -W 64 -H 64 -o out/flux-calib.png --imatrix-out out/flux-calib.dat --force",
		"sdtool generate -m testdata/tiny-flux2-klein.gguf -r out/cat.png -p 'the cat in red' --steps 1 -W 64 -H 64 -o out/klein-edit.png --force",
		"sdtool generate -m testdata/tiny-wan.gguf -M vid_gen --video-frames 9 --fps 8 -p 'a cat' --steps 2 -o out/cat.avi --force",
		"sdtool generate -m testdata/tiny-wan.gguf -M vid_gen --video-frames 5 -p 'a cat' --steps 1 -W 32 -H 32 -o out/cat_%03d.png --compare testdata/tiny-wan.gguf --force",
		"sdtool generate -m testdata/tiny-wan-ti2v.gguf -M vid_gen -i out/cat_000.png --video-frames 5 -p 'a cat' --steps 1 -o out/ti2v_%03d.png --force",
		"sdtool generate --diffusion-model testdata/tiny-qwen-image-diffusion-model.gguf --llm testdata/tiny-qwen-image-llm.gguf --vae testdata/tiny-qwen-image-vae.safetensors -p '一只猫 (a cat:1.2)' -o out/cat-qwen.png --imatrix-out out/qwen-calib.dat --force",
		"sdtool generate --diffusion-model testdata/tiny-z-image-diffusion-model.gguf --llm testdata/tiny-z-image-llm.gguf --vae testdata/tiny-z-image-vae.gguf -p 'a red cat' --steps 2 -W 64 -H 64 -o out/cat-z.png --force",
	)
}

func runGenerate(c *cli.Context) error {
	if !infer.Available {
		return fmt.Errorf("generate: %w", infer.ErrNoCgo)
	}
	out := c.String("output")
	if err := checkOutputName(out); err != nil {
		return err
	}
	prompts, err := generatePrompts(c)
	if err != nil {
		return err
	}
	if err := checkGenerateOutputs(c, out, len(prompts)); err != nil {
		return err
	}
	for _, f := range []string{"cfg-scale", "guidance"} {
		// Checked as given: past float32's range it would read as +Inf.
		if v := c.Float64(f); c.IsSet(f) && !(v >= 0 && v < 1000) {
			return fmt.Errorf("--%s %g: want a value from 0 to below 1000", f, v)
		}
	}
	method, err := infer.ParseMethod(c.String("sampling-method"))
	if err != nil {
		return err
	}
	sched, err := infer.ParseScheduler(c.String("scheduler"))
	if err != nil {
		return err
	}
	threads, err := ggmlThreads(c)
	if err != nil {
		return err
	}
	comps := components(c, false)
	if c.Bool("json") && !comparing(c) {
		return errors.New("generate: --json prints what --compare measures; give --compare REF_MODEL (or --compare-diffusion-model, ...)")
	}
	if !comps.HasPrimary() {
		return errors.New("generate: give a model: -m FILE, or --diffusion-model FILE with its text encoders and VAE")
	}
	tok, tokSaid, notFound := resolveTokenizer(c.String("tokenizer"), comps)
	opt, err := generateLoadOptions(c, threads, tok)
	if err != nil {
		return err
	}
	// Caught before the model is loaded, so that a signal while its files
	// are read ends with a message, and one sent on seeing the model line
	// (TestGenerateSIGTERMWhileEncoding) finds the handler.
	ctx, stop := console.SignalContext()
	defer stop()
	m, err := loadGenerateModel(ctx, comps, opt, notFound)
	if err != nil {
		return err
	}
	defer m.Close()
	warnRuntime(c, m, opt.Runtime)
	if tokSaid != "" {
		fmt.Fprintln(c.App.ErrWriter, tokSaid)
	}
	imat, err := startImatrix(c, m)
	if err != nil {
		return err
	}
	req, err := generateRequest(c, m, prompts[0], method, sched)
	if err != nil {
		return err
	}
	logModel(comps, m)
	req.Context = ctx
	for i := range prompts {
		if err := checkVideoOutputs(c, promptOutput(out, i, len(prompts)), max(req.Frames, 1)); err != nil {
			return err
		}
	}
	for i, p := range prompts {
		req.Prompt, req.Seed = p, uint64(c.Int64("seed")+int64(i))
		if err := generateOne(c, m, opt, req, promptOutput(out, i, len(prompts))); err != nil {
			if errors.Is(err, infer.ErrInterrupted) {
				return interruptedGenerate(c, imat, err, i, len(prompts))
			}
			return budgetHint(err)
		}
	}
	return imat.finish(c, c.String("prompt-file"))
}

// generateLoadOptions are generate's flags for loading the model.
func generateLoadOptions(c *cli.Context, threads int, clipTokenizer string) (infer.LoadOptions, error) {
	rt := c.String("runtime")
	opt := infer.LoadOptions{Tokenizers: map[string]string{"clip": clipTokenizer, "t5": c.String("t5-tokenizer"), "llm": c.String("llm-tokenizer")},
		Threads: threads, Prediction: c.String("prediction"), Runtime: rt, StoredLayout: rt == infer.RuntimeSDCPP,
		FlowShift: float32(c.Float64("flow-shift")),
		// Only img2img and references encode: the VAE's encoder stays out of memory.
		VAEDecodeOnly: c.String("init-img") == "" && len(c.StringSlice("ref-image")) == 0,
		// One image holds one part at a time; a prompt file keeps them for the next.
		PartsInTurn: c.String("prompt-file") == ""}
	var err error
	if opt.ModelArgs, err = parseModelArgs(c.String("model-args")); err != nil {
		return opt, err
	}
	opt.MaxMemory, err = memoryBudget(c)
	opt.Rebudget = rebudget(c)
	return opt, err
}

// loadGenerateModel loads the model, saying a signal that came meanwhile,
// a missing tokenizer with where it was looked for (notFound) and missing
// components by their flags.
func loadGenerateModel(ctx context.Context, comps infer.Components, opt infer.LoadOptions, notFound error) (*infer.Model, error) {
	testHookBeforeLoad(ctx)
	m, err := infer.Load(comps, opt)
	if ctx.Err() != nil {
		if err == nil {
			m.Close()
		}
		return nil, fmt.Errorf("generate: interrupted (%v) while loading the model; nothing was written", context.Cause(ctx))
	}
	if err == nil {
		return m, nil
	}
	err = budgetHint(err)
	// The model's own problems come first (infer checks them before the
	// tokenizer); a missing tokenizer is said with where it was looked for.
	if notFound != nil && errors.Is(err, text.ErrNoTokenizer) {
		return nil, notFound
	}
	if e := missingParts(comps); e != nil {
		return nil, e
	}
	return nil, err
}

// generateRequest is the request of generate's flags for the first prompt:
// the family's and the file's defaults where a flag is not given, the
// init image, the video settings and the size aligned as sd-cli aligns it.
func generateRequest(c *cli.Context, m *infer.Model, prompt string, method infer.Method, sched infer.Scheduler) (infer.Request, error) {
	cfg, def := m.Config, m.Family.Defaults
	req := infer.Request{
		Prompt: prompt, Negative: c.String("negative-prompt"),
		Width: pick(c.Int("width"), cfg.DefaultWidth, def.Width), Height: pick(c.Int("height"), cfg.DefaultHeight, def.Height),
		Steps: pick(c.Int("steps"), cfg.DefaultSteps, def.Steps), CFGScale: def.CFGScale, Guidance: def.Guidance,
		Seed: uint64(c.Int64("seed")), RNG: c.String("rng"), Method: cmp.Or(method, def.Method), Scheduler: cmp.Or(sched, def.Scheduler),
		CaptureBlocks: comparing(c),
	}
	if c.IsSet("cfg-scale") {
		req.CFGScale = float32(c.Float64("cfg-scale"))
	}
	if c.IsSet("guidance") {
		req.Guidance = float32(c.Float64("guidance"))
	}
	if err := initImage(c, &req); err != nil {
		return req, err
	}
	if err := refImages(c, &req); err != nil {
		return req, err
	}
	if err := videoRequest(c, m, &req); err != nil {
		return req, err
	}
	if w, h, mult := m.AlignSize(req.Width, req.Height); req.Init == nil && (w != req.Width || h != req.Height) {
		fmt.Fprintf(c.App.ErrWriter, "warning: aligning the image size up from %dx%d to %dx%d (a multiple of %d for this model), as sd-cli does\n",
			req.Width, req.Height, w, h, mult)
		req.Width, req.Height = w, h
	}
	return req, nil
}

// initImage reads --init-img into req: its size is the image's unless -W
// or -H is given, when the two must agree.
func initImage(c *cli.Context, req *infer.Request) error {
	p := c.String("init-img")
	if p == "" {
		return nil
	}
	var wantW, wantH int
	if c.IsSet("width") || c.IsSet("height") {
		wantW, wantH = req.Width, req.Height
	}
	img, err := readPNGSized(p, wantW, wantH)
	if err != nil {
		return err
	}
	var w, h int
	req.Init, w, h = infer.CHWFromImage(img)
	if !c.IsSet("width") && !c.IsSet("height") {
		req.Width, req.Height = w, h
	} else if w != req.Width || h != req.Height {
		return fmt.Errorf("%s: image is %dx%d, not %dx%d", p, w, h, req.Width, req.Height)
	}
	req.Strength = float32(c.Float64("strength"))
	return nil
}

// refImages reads --ref-image into req; without -W, -H and an init image
// the size is the first reference's, as sd-cli takes it.
func refImages(c *cli.Context, req *infer.Request) error {
	for i, p := range c.StringSlice("ref-image") {
		img, err := readPNG(p)
		if err != nil {
			return err
		}
		pix, w, h := infer.CHWFromImage(img)
		req.Refs = append(req.Refs, infer.RefImage{Pixels: pix, Width: w, Height: h})
		if i == 0 && req.Init == nil && !c.IsSet("width") && !c.IsSet("height") {
			req.Width, req.Height = w, h
		}
	}
	return nil
}

// logModel logs (at -v) what was loaded and how it was understood.
func logModel(comps infer.Components, m *infer.Model) {
	cfg := m.Config
	encoders := make([]string, len(cfg.Encoders))
	for i, e := range cfg.Encoders {
		encoders[i] = fmt.Sprintf("%+v", e)
	}
	slog.Debug("model", "files", comps.Files(), "family", cfg.Family, "network", fmt.Sprintf("%+v", cfg.Network),
		"text", encoders, "vae", fmt.Sprintf("%+v %+v", cfg.VAE, cfg.VAE.Layout), "prediction", cfg.Prediction, "load", m.LoadTime)
}

// testHookBeforeLoad runs just before generate loads the model: tests hold
// the load there to deliver a signal during it.
var testHookBeforeLoad = func(context.Context) {}

// generateOne generates req, writes the PNG out and runs --compare.
func generateOne(c *cli.Context, m *infer.Model, opt infer.LoadOptions, req infer.Request, out string) error {
	res, err := generateWithBar(c.App.ErrWriter, m, req, "generate")
	if err != nil {
		return err
	}
	warnNaN(c, m.Path, res)
	params := infer.GenerationParams{
		Prompt: req.Prompt, NegativePrompt: req.Negative, Steps: req.Steps, Sampler: req.Method, Scheduler: req.Scheduler,
		CFGScale: req.CFGScale, Seed: int64(req.Seed), Width: req.Width, Height: req.Height,
		Model: filepath.Base(m.Path), RNG: req.RNG, Strength: req.Strength, Version: "sdtool " + version,
	}
	var frames []image.Image
	if req.Frames > 0 {
		if frames, err = writeVideo(c, m, req, res, out, params); err != nil {
			return err
		}
	} else {
		img, err := infer.ImageFromCHW(res.Pixels, res.Width, res.Height)
		if err != nil {
			return err
		}
		err = pipeline.WriteAtomic(c.Context, out, pipeline.PublishOptions{Force: c.Bool("force"), Inputs: generateInputs(c), Logger: slog.Default()},
			func(w io.Writer) error {
				return pngtext.Write(w, img, map[string]string{pngtext.ParametersKey: params.String()}, nil)
			})
		if err != nil {
			return err
		}
		frames = []image.Image{img}
	}
	t := res.Timings
	fmt.Fprintf(c.App.ErrWriter, "wrote %s (%dx%d%s, %s): load %s, text %s, sampling %s (%.2f s/step), decode %s%s%s\n",
		videoOutputNote(out, res.Frames), res.Width, res.Height, framesNote(req, res), m.Family.Title, round(m.LoadTime), round(t.Text), round(t.Sampling),
		t.Sampling.Seconds()/float64(max(t.Steps, 1)), round(t.Decode), memorySummary(m), peakRSS())
	if comparing(c) {
		if err := compareWith(c, m, components(c, true).WithDefaults(m.Components), opt, req, res, frames); err != nil {
			if errors.Is(err, infer.ErrInterrupted) {
				return fmt.Errorf("%w during the --compare reference run (%s was written; no comparison)", err, out)
			}
			return err
		}
	}
	return nil
}

// pick returns the flag value when set, else the model's default, else the fallback.
func pick(flag, model, fallback int) int {
	if flag != 0 {
		return flag
	}
	if model != 0 {
		return model
	}
	return fallback
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// generateWithBar runs req with a per-step progress bar when stderr is a terminal.
func generateWithBar(stderr io.Writer, m *infer.Model, req infer.Request, label string) (*infer.Result, error) {
	update, finish := console.Steps(stderr, label, req.Steps)
	defer finish()
	req.OnStep = func(step, steps int) {
		// After the first step every argument has been checked and the
		// work is under way: the moment to say the build is slow (before
		// the step bar draws its first frame).
		noteSlowBuildOnce(stderr, infer.LinkedAVX2())
		if update != nil {
			update(step, steps)
		}
	}
	return m.Generate(req)
}

// peakRSS formats the process's peak resident memory so far (Linux), or "".
func peakRSS() string {
	if b := procmem.Peak(); b > 0 {
		return fmt.Sprintf(", peak RSS %.0f MiB", float64(b)/(1<<20))
	}
	return ""
}

// compareWith runs req with the reference model (or takes its render from
// the reference cache) and prints the comparison; m is the tested model.
func compareWith(c *cli.Context, m *infer.Model, refFiles infer.Components, opt infer.LoadOptions, req infer.Request, res *infer.Result, frames []image.Image) error {
	// The tested model's render is kept while the reference runs: its
	// budget leaves room for it.
	opt.Held = resultBytes(res) + imageBytes(frames)
	ref, err := referenceRender(c, m, refFiles, opt, req)
	if err != nil {
		return err
	}
	rf, err := infer.FrameImages(ref)
	if err != nil {
		return err
	}
	refFrames := make([]image.Image, len(rf))
	for i, f := range rf {
		refFrames[i] = f
	}
	cos, err := metrics.CosineSimilarity(ref.Latent, res.Latent)
	if err != nil {
		return err
	}
	r := compareResult{Model: components(c, false).Files(), Reference: refFiles.Files(), Runtime: opt.Runtime,
		Prompt: req.Prompt, Seed: req.Seed, Steps: req.Steps, Width: res.Width, Height: res.Height,
		LatentCosine: cos, Blocks: []compareBlock{}}
	if err := compareVideo(&r, refFrames, frames); err != nil {
		return err
	}
	byName := map[string][]float32{}
	for _, b := range ref.Blocks {
		byName[b.Name] = b.Values
	}
	for _, b := range res.Blocks {
		cb := compareBlock{Name: b.Name}
		if rv, ok := byName[b.Name]; !ok {
			cb.Error = "missing in the reference"
		} else if e, err := metrics.CompareTensors(rv, b.Values); err != nil {
			cb.Error = err.Error()
		} else if math.IsInf(e.RelRMSE, 0) || math.IsNaN(e.RelRMSE) || math.IsNaN(e.Cosine) {
			cb.Error = "the reference's output is all zeros or not finite"
		} else {
			cb.Cosine, cb.RelError, cb.MaxAbs = &e.Cosine, &e.RelRMSE, &e.MaxAbs
		}
		r.Blocks = append(r.Blocks, cb)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, r)
	}
	return r.writeText(c.App.Writer)
}

// referenceRender renders req with the reference model, unless the
// reference cache has that render.
func referenceRender(c *cli.Context, m *infer.Model, refFiles infer.Components, opt infer.LoadOptions, req infer.Request) (*infer.Result, error) {
	rc, err := referenceCache(c)
	if err != nil {
		return nil, err
	}
	key := ""
	if req.Init == nil { // img2img renders are not kept
		key = renderKey(rc, componentPaths(refFiles), requestSettings(req), loadSettings(opt))
	}
	if key != "" {
		if ref, ok := rc.Get(key); ok {
			fmt.Fprintf(c.App.ErrWriter, "reference: %s rendered from the reference cache\n", strings.Join(refFiles.Files(), " "))
			return ref, nil
		}
	}
	// The reference runs within the same budget: the tested model's
	// weights make room (the next prompt reads them again).
	if err := m.Release(); err != nil {
		return nil, err
	}
	// The default budget follows the memory available now, with the
	// tested model's weights released.
	if opt.MaxMemory, err = memoryBudget(c); err != nil {
		return nil, err
	}
	rm, err := infer.Load(refFiles, opt)
	if err != nil {
		return nil, budgetHint(err)
	}
	defer rm.Close()
	warnRuntime(c, rm, opt.Runtime)
	ref, err := generateWithBar(c.App.ErrWriter, rm, req, "reference")
	if err != nil {
		return nil, budgetHint(err)
	}
	warnNaN(c, rm.Path, ref)
	// The reference (a BF16 source, often streamed) gets its own timing and
	// memory line: its seconds per step are what a budget costs.
	t := ref.Timings
	fmt.Fprintf(c.App.ErrWriter, "reference: rendered %s: load %s, text %s, sampling %s (%.2f s/step), decode %s%s%s\n",
		strings.Join(refFiles.Files(), " "), round(rm.LoadTime), round(t.Text), round(t.Sampling),
		t.Sampling.Seconds()/float64(max(t.Steps, 1)), round(t.Decode), memorySummary(rm), peakRSS())
	putReference(c.Context, c, rc, key, ref)
	return ref, nil
}

// compareResult is what generate --compare measures for one image; --json
// prints it as documented in docs/compare-json.md.
type compareResult struct {
	// Model and Reference are the files of the two weight sets, as FLAG=PATH.
	Model     []string `json:"model"`
	Reference []string `json:"reference"`
	// Runtime is the --runtime whose arithmetic both ran with.
	Runtime string `json:"runtime"`
	// Prompt, Seed, Steps, Width and Height say what was rendered.
	Prompt string `json:"prompt"`
	Seed   uint64 `json:"seed"`
	Steps  int    `json:"steps"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	// PSNR is the image PSNR in dB; nil when the images are identical.
	PSNR *float64 `json:"psnr_db"`
	// Identical is true when the two images are the same pixel for pixel.
	Identical bool `json:"identical"`
	// SSIM is the images' structural similarity.
	SSIM float64 `json:"ssim"`
	// LatentCosine is the cosine similarity of the final latents.
	LatentCosine float64 `json:"latent_cosine"`
	// Blocks compare each network block's output at step 1, in network order.
	Blocks []compareBlock `json:"blocks"`
	// Frames compare a video frame by frame (absent for an image); PSNR and
	// SSIM above are then over the clip, and Flicker is the largest
	// difference between the two videos' frame-to-frame change.
	Frames  []compareFrame `json:"frames,omitempty"`
	Flicker float64        `json:"flicker,omitempty"`
}

// compareBlock is one network block's output against the reference's.
type compareBlock struct {
	// Name is the block's name ("input_blocks.1", "double_blocks.0").
	Name string `json:"name"`
	// Cosine, RelError (‖a−b‖/‖a‖, as sdtool diff defines it) and MaxAbs
	// compare the outputs; nil when Error says why they could not be.
	Cosine   *float64 `json:"cosine"`
	RelError *float64 `json:"rel_error"`
	MaxAbs   *float64 `json:"max_abs_diff"`
	// Error says why the block could not be compared ("" when it was).
	Error string `json:"error,omitempty"`
}

// writeText prints the comparison as generate does without --json.
func (r *compareResult) writeText(w io.Writer) error {
	fmt.Fprintf(w, "compare %s (model) with %s (reference), seed %d, %s, as %s computes them:\n",
		strings.Join(r.Model, " "), strings.Join(r.Reference, " "), r.Seed, pipeline.Count(r.Steps, "step", "steps"), runtimeTitle(r.Runtime))
	psnr := math.Inf(1)
	if r.PSNR != nil {
		psnr = *r.PSNR
	}
	fmt.Fprintf(w, "  image PSNR %.2f dB, SSIM %.4f; final latent cosine %.6f\n", psnr, r.SSIM, r.LatentCosine)
	r.writeFramesText(w)
	fmt.Fprintf(w, "  network block outputs at step 1 (conditional pass):\n  %-18s %10s %10s %10s\n", "block", "cosine", "rel error", "max abs")
	for _, b := range r.Blocks {
		if b.Error != "" {
			fmt.Fprintf(w, "  %-18s (%s)\n", b.Name, b.Error)
			continue
		}
		fmt.Fprintf(w, "  %-18s %10.6f %10.5f %10.4g\n", b.Name, *b.Cosine, *b.RelError, *b.MaxAbs)
	}
	return nil
}

// maxInitPixels bounds an init image: 4096x4096, four times the largest
// size the supported families are trained for (SDXL's 2048x2048 at most),
// so that a small compressed file declaring a huge image is refused from
// its header before gigabytes are decoded.
const maxInitPixels = 4096 * 4096

// maxInitFile bounds an init image's file: a 4096x4096 PNG of 16-bit RGBA
// stored without compression is 128 MiB.
const maxInitFile = 256 << 20

// readPNG decodes the image at path, refusing one past maxInitPixels.
func readPNG(path string) (image.Image, error) { return readPNGSized(path, 0, 0) }

// readPNGSized decodes the image at path. Its size is checked from the
// header first, against the bound and against w x h when they are not 0,
// so that an image that will be refused is never decoded.
func readPNGSized(path string, w, h int) (image.Image, error) {
	f, _, err := formats.OpenRegular(path, maxInitFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, _, err := image.DecodeConfig(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > maxInitPixels {
		return nil, fmt.Errorf("%s: image is %dx%d; input images may have at most %d pixels (4096x4096)", path, cfg.Width, cfg.Height, maxInitPixels)
	}
	if w != 0 && h != 0 && (cfg.Width != w || cfg.Height != h) {
		return nil, fmt.Errorf("%s: image is %dx%d, not %dx%d", path, cfg.Width, cfg.Height, w, h)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// generateInputs lists the files generate reads, which no output may replace.
func generateInputs(c *cli.Context) []string { return readFiles(c) }

// warnNaN says when a generation decoded to NaN values. The image is still
// written, white where the values are NaN, because that is what sd-cli
// shows for the same weights (an FP8 file run without its weight_scale
// overflows to NaN in both): --compare then reports the quality the user
// of that runtime will see rather than no figure at all.
func warnNaN(c *cli.Context, path string, res *infer.Result) {
	if res.NaNPixels == 0 {
		return
	}
	fmt.Fprintf(c.App.ErrWriter, "warning: %s: %d of the %d decoded values are NaN (the weights overflow in this runtime's arithmetic); they are written white, as sd-cli writes them\n",
		path, res.NaNPixels, len(res.Pixels))
}

// runtimeTitle names a --runtime for the comparison's heading.
func runtimeTitle(rt string) string {
	if rt == infer.RuntimeComfyUI {
		return "ComfyUI"
	}
	return "stable-diffusion.cpp (--runtime sdcpp)"
}

// warnRuntime says how the model's ComfyUI modules run, and warns when the
// runtime chosen renders its FP8 modules without their weight scale
// (stable-diffusion.cpp does; generate follows).
func warnRuntime(c *cli.Context, m *infer.Model, rt string) {
	for _, u := range m.Unused {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s: %s reads none of its tensors; it does not change the image\n", u, m.Family.Title)
	}
	if m.W8A8Modules > 0 {
		fmt.Fprintf(c.App.ErrWriter, "%s: %d INT8 modules run as W8A8 (activations quantized per row to INT8, integer products), as the runtimes run them\n",
			m.Path, m.W8A8Modules)
	}
	if m.UnscaledFP8 > 0 && infer.FP8ScaleIgnored(rt) {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s: stable-diffusion.cpp renders this file wrong: it multiplies by the codes of its %d FP8 modules without their weight_scale; "+
			"generate does the same (--runtime sdcpp); --runtime comfyui applies the scales as ComfyUI does\n", m.Path, m.UnscaledFP8)
	}
}

// parseModelArgs reads --model-args' comma-separated KEY=VALUE pairs.
func parseModelArgs(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--model-args: %q is not KEY=VALUE", kv)
		}
		out[k] = val
	}
	return out, nil
}
