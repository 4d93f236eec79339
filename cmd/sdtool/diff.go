package main

import (
	"fmt"
	"regexp"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
)

func init() {
	register(&cli.Command{
		Name:      "diff",
		Usage:     "compare two models tensor by tensor: names, shapes, types and the error of B against A",
		ArgsUsage: "A B",
		Description: "Reads A and B (any format sdtool reads, any tensor type; ComfyUI int8/fp8 layers are decoded\n" +
			"through their scales) and lists the tensors only in A or only in B, shape and type changes (a\n" +
			"GGUF's comfy.gguf.orig_shape counts as its shape), and for every tensor in both the relative error\n" +
			"‖a−b‖/‖a‖, the cosine similarity, the SNR in dB (10·log10(‖a‖²/‖a−b‖²)) and the largest |a−b|,\n" +
			"worst first, with totals over all compared elements. Both sides are dequantized to float32 on the\n" +
			"fly in chunks, so memory stays bounded. --json writes the schema in docs/diff-json.md.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "write JSON (docs/diff-json.md)"},
			&cli.StringSliceFlag{Name: "filter", Usage: "compare only tensors whose name matches `REGEX` (repeatable: any may match)"},
			threadsFlag("`N` tensors compared at once"),
		},
		Action: runDiff,
	},
		"sdtool diff testdata/tiny-sd1.safetensors testdata/tiny-sd1.safetensors --filter 'attn2\\.to_k'",
		"sdtool diff testdata/tiny-sd1.safetensors testdata/tiny-sd1.safetensors --json --filter '^cond_stage_model\\..*fc2\\.weight$'",
	)
}

func runDiff(c *cli.Context) error {
	if c.NArg() != 2 {
		return fmt.Errorf("diff: want two models A and B, got %s", pipeline.Count(c.NArg(), "argument", "arguments"))
	}
	var opts inspect.DiffOptions
	for _, f := range c.StringSlice("filter") {
		re, err := regexp.Compile(f)
		if err != nil {
			return fmt.Errorf("diff: --filter %q: %v", f, err)
		}
		opts.Filters = append(opts.Filters, re)
	}
	threads, err := threadsOf(c)
	if err != nil {
		return err
	}
	opts.Threads = threads
	a, err := formats.Open(c.Args().Get(0))
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := formats.Open(c.Args().Get(1))
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, stop := console.SignalContext()
	defer stop()
	bar := console.New("diff", 0)
	opts.Context, opts.Progress = ctx, bar.Update
	r, err := inspect.Diff(a, b, opts)
	if err != nil {
		bar.Abandon()
		return fmt.Errorf("diff: %w", err)
	}
	bar.Finish()
	if c.Bool("json") {
		return inspect.WriteDiffJSON(c.App.Writer, r)
	}
	return inspect.WriteDiffText(c.App.Writer, r)
}
