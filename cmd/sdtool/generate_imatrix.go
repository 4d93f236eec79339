package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
)

// imatrix collection and prompt files for generate (issue 8).

// generateImatrixFlags are generate's calibration flags.
func generateImatrixFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "prompt-file", Usage: "run every prompt of `FILE` (one per line, blank lines skipped), seeds SEED, SEED+1, ...; images OUT-1.png, OUT-2.png, ..."},
		&cli.StringFlag{Name: "imatrix-out", Aliases: []string{"imat-out"}, Usage: "collect an importance matrix of the UNet and text-encoder linear weights and write it to `FILE` (.gguf: llama.cpp GGUF imatrix with each layer's activation maxima, which quantize turns into fp8/nvfp4 input_scale; else legacy .dat as sd-cli writes)"},
		&cli.StringSliceFlag{Name: "imatrix-in", Aliases: []string{"imat-in"}, Usage: "continue from an earlier imatrix `FILE` (.dat or GGUF; repeatable)"},
	}
}

// generatePrompts returns the prompts to run: --prompt-file's lines, else --prompt.
func generatePrompts(c *cli.Context) ([]string, error) {
	path := c.String("prompt-file")
	if err := checkPrompts("--negative-prompt", c.String("negative-prompt")); err != nil {
		return nil, err
	}
	if path == "" {
		// An empty prompt is a prompt, as in sd-cli (common with Flux):
		// only a missing -p is refused.
		if !c.IsSet("prompt") {
			return nil, errors.New("generate: give --prompt (-p) or --prompt-file")
		}
		return []string{c.String("prompt")}, checkPrompts("--prompt", c.String("prompt"))
	}
	if c.IsSet("prompt") {
		return nil, errors.New("generate: give --prompt or --prompt-file, not both")
	}
	if comparing(c) {
		return nil, errors.New("generate: --compare takes one --prompt, not --prompt-file")
	}
	f, _, err := formats.OpenRegular(path, formats.MaxTextFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if p := strings.TrimSpace(sc.Text()); p != "" {
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	return out, checkPrompts(path, out...)
}

// maxPromptBytes bounds a prompt: about 1,500 words, some 25 of CLIP's
// 77-token chunks, far above what a model attends to, so that a runaway
// prompt (30,000 words took minutes to encode) is refused at once.
const maxPromptBytes = 8 << 10

// checkPrompts refuses, before any work, a prompt that is too long or is
// not UTF-8 text (which would fail only when its turn came, after the
// earlier images); what names the flag or file it came from.
func checkPrompts(what string, prompts ...string) error {
	for i, p := range prompts {
		where := what
		if len(prompts) > 1 {
			where = fmt.Sprintf("%s, prompt %d", what, i+1)
		}
		if len(p) > maxPromptBytes {
			return fmt.Errorf("%s: the prompt is %d bytes; at most %d (about 1,500 words) are encoded", where, len(p), maxPromptBytes)
		}
		if !utf8.ValidString(p) {
			return fmt.Errorf("%s: the prompt is not UTF-8 text", where)
		}
	}
	return nil
}

// checkGenerateOutputs refuses, before any work, every output generate
// would write: each prompt's image and the --imatrix-out file (which may be
// one of its --imatrix-in files: continuing in place), so that a missing
// folder or an existing file fails at once.
func checkGenerateOutputs(c *cli.Context, out string, prompts int) error {
	for i := range prompts {
		if err := pipeline.CheckOutput(promptOutput(out, i, prompts), generateInputs(c), c.Bool("force")); err != nil {
			return err
		}
	}
	if im := c.String("imatrix-out"); im != "" {
		return pipeline.CheckOutput(im, imatrixOutInputs(c, im, prompts), c.Bool("force") || containsSame(c.StringSlice("imatrix-in"), im))
	}
	return nil
}

// promptOutput names the image of prompt i (0-based) of n: OUT itself for
// one prompt, OUT-<i+1>.png for several.
func promptOutput(out string, i, n int) string {
	if n == 1 {
		return out
	}
	ext := filepath.Ext(out)
	return fmt.Sprintf("%s-%d%s", strings.TrimSuffix(out, ext), i+1, ext)
}

// imatrixRun is generate's collection: the statistics and the earlier files.
type imatrixRun struct {
	out    string
	files  []string
	priors []*imatrix.Matrix
	stats  *infer.ImatrixStats
}

// startImatrix checks --imatrix-out/--imatrix-in before any generation (so
// that a bad file fails fast) and turns collection on; nil when not asked.
// The output may be one of the inputs (continuing in place: the inputs are
// read first); any other existing output needs --force.
func startImatrix(c *cli.Context, m *infer.Model) (*imatrixRun, error) {
	out, ins := c.String("imatrix-out"), c.StringSlice("imatrix-in")
	if out == "" {
		if len(ins) > 0 {
			return nil, errors.New("generate: --imatrix-in needs --imatrix-out")
		}
		return nil, nil
	}
	r := &imatrixRun{out: out, files: ins}
	for _, in := range ins {
		mx, err := imatrix.Open(in)
		if err != nil {
			return nil, err
		}
		if err := mx.Validate(in); err != nil {
			return nil, err
		}
		r.priors = append(r.priors, mx)
	}
	if err := pipeline.CheckOutput(out, imatrixOutInputs(c, out, 0), c.Bool("force") || containsSame(ins, out)); err != nil {
		return nil, err
	}
	r.stats = infer.NewImatrixStats()
	m.SetImatrix(r.stats)
	return r, nil
}

// imatrixOutInputs lists what --imatrix-out OUT must not replace: every
// file generate reads except the --imatrix-in files that are OUT itself
// (continuing in place), and the first prompts images generate writes.
func imatrixOutInputs(c *cli.Context, out string, prompts int) []string {
	var in []string
	for _, f := range readFiles(c) {
		if !(slices.Contains(c.StringSlice("imatrix-in"), f) && (f == out || pipeline.SameFile(f, out))) {
			in = append(in, f)
		}
	}
	for i := range prompts {
		in = append(in, promptOutput(c.String("output"), i, prompts))
	}
	return in
}

func containsSame(files []string, f string) bool {
	for _, x := range files {
		if pipeline.SameFile(x, f) {
			return true
		}
	}
	return false
}

// finish merges the earlier files and writes the matrix (.gguf by
// extension, else .dat) through the pipeline's atomic publish.
func (r *imatrixRun) finish(c *cli.Context, dataset string) error {
	if r == nil {
		return nil
	}
	if r.stats.Len() == 0 {
		return fmt.Errorf("%s: no statistics were collected (no linear weights ran)", r.out)
	}
	m, err := infer.ContinueImatrix(r.stats.Matrix(dataset), r.files, r.priors)
	if err != nil {
		return err
	}
	if n := r.stats.Skipped(); n > 0 {
		fmt.Fprintf(c.App.ErrWriter, "imatrix: %d products with non-finite activations were left out\n", n)
	}
	var long []string
	// The output may be one of the --imatrix-in files, read above: continuing in place replaces it.
	force := c.Bool("force") || containsSame(r.files, r.out)
	err = pipeline.WriteAtomic(c.Context, r.out, pipeline.PublishOptions{Force: force, Inputs: imatrixOutInputs(c, r.out, 0), Logger: slog.Default()},
		func(w io.Writer) (err error) {
			long, err = imatrix.Encode(w, r.out, m)
			return err
		})
	if err != nil {
		return err
	}
	if len(long) > 0 {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s: %d GGUF imatrix names are 64 bytes or longer (first %q); stock llama.cpp refuses them: write .dat for it\n",
			r.out, len(long), long[0]+".in_sum2")
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s, %s\n", r.out, pipeline.Count(len(m.Entries), "entry", "entries"), pipeline.Count(m.ChunkCount, "UNet evaluation", "UNet evaluations"))
	if !strings.EqualFold(filepath.Ext(r.out), ".gguf") && slices.ContainsFunc(m.Entries, func(e *imatrix.Entry) bool { return e.AbsMax != nil }) {
		fmt.Fprintf(c.App.ErrWriter, "note: the legacy format has no place for the activation maxima that quantize turns into fp8 and nvfp4 input_scale: write .gguf to keep them\n")
	}
	return nil
}

// interruptedGenerate ends a run that Ctrl-C or SIGTERM stopped during
// prompt i (0-based) of n: the images of the earlier prompts stay, the
// current one is not written, and a calibration run writes the importance
// matrix it has collected so far (every UNet evaluation that completed,
// the interrupted prompt's included: the statistics are sums, so a partial
// set is still a valid one). The error says all of that on one line.
func interruptedGenerate(c *cli.Context, imat *imatrixRun, err error, i, n int) error {
	msg := fmt.Sprintf("generate: %v", err)
	if n > 1 {
		msg += fmt.Sprintf(" of prompt %d of %d (%s written before)", i+1, n, pipeline.Count(i, "image", "images"))
	}
	if !strings.Contains(msg, "--compare reference run") {
		msg += "; its image is not written"
	}
	if imat != nil {
		if imat.stats.Len() == 0 {
			return fmt.Errorf("%s; %s not written: nothing was collected yet", msg, imat.out)
		}
		if werr := imat.finish(c, c.String("prompt-file")); werr != nil {
			return fmt.Errorf("%s; writing what was collected failed: %v", msg, werr)
		}
		msg += fmt.Sprintf("; %s holds what was collected so far", imat.out)
	}
	return errors.New(msg)
}
