package main

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/inspect"
)

func init() {
	register(&cli.Command{
		Name:      "inspect",
		Usage:     "summarise checkpoints: format, metadata, types, architecture, tensors",
		ArgsUsage: "FILE...",
		Description: "Prints, for each FILE (GGUF, split GGUF, safetensors, a sharded safetensors index or shard), the\n" +
			"format, alignment, data offset, shards, warnings, metadata (long arrays and strings shortened),\n" +
			"tensor and parameter counts, bytes per type, the detected architecture and components, ComfyUI\n" +
			"quantized modules, over-long names, and a table of every tensor. An adapter file (LoRA, LoCon, LoHa,\n" +
			"LoKr, full diffs) also gets its naming (kohya, PEFT, diffusers, LyCORIS, ...), layer kinds and count,\n" +
			"the parts it adapts, ranks, alphas and the family it was made for. Only headers are read (and the\n" +
			"few bytes of comfy_quant markers and adapter alphas). A file shorter than its header says (a cut-short\n" +
			"download) is shown with a warning naming the bytes missing and the tensors cut; other commands refuse it.\n" +
			"--json writes the schema documented in docs/inspect-json.md (an array for several files).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "write JSON (one object per file; an array for several files)"},
			&cli.StringSliceFlag{Name: "filter", Usage: "list only tensors whose name matches `REGEX` (repeatable: any may match)"},
			&cli.BoolFlag{Name: "no-tensors", Usage: "leave out the tensor table"},
		},
		Action: runInspect,
	},
		"sdtool inspect testdata/tiny-sd1.safetensors --no-tensors",
		"sdtool inspect testdata/tiny-sd1.safetensors --filter 'attn2\\.to_[kv]' --filter '^first_stage_model\\.decoder\\.conv_(in|out)'",
		"sdtool inspect --json testdata/tiny-sd1.safetensors --filter 'input_blocks\\.1\\.1\\..*\\.weight$'",
		"sdtool inspect testdata/tiny-sd1-lora.safetensors --no-tensors",
	)
}

func runInspect(c *cli.Context) error {
	if c.NArg() == 0 {
		return fmt.Errorf("inspect: no FILE given (see sdtool inspect --help)")
	}
	var opts inspect.Options
	for _, f := range c.StringSlice("filter") {
		re, err := regexp.Compile(f)
		if err != nil {
			return fmt.Errorf("inspect: --filter %q: %v", f, err)
		}
		opts.Filters = append(opts.Filters, re)
	}
	opts.NoTensors = c.Bool("no-tensors")
	var all []*inspect.Summary
	for i, path := range c.Args().Slice() {
		start := time.Now()
		m, err := formats.Open(path)
		// A truncated download still has its whole header: show it, with
		// the truncation as its first warning, where other commands refuse.
		var te *formats.TruncatedError
		if errors.As(err, &te) && te.Header != nil {
			m, err = te.Header, nil
		}
		if err != nil {
			return err
		}
		s, err := inspect.Summarize(m, opts)
		m.Close()
		if err != nil {
			return err
		}
		if te != nil {
			s.Truncated = inspect.TruncationOf(te)
			defer fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", te.Warning())
		}
		slog.Debug("inspected", "file", path, "tensors", s.TensorCount, "elapsed", time.Since(start))
		if c.Bool("json") {
			all = append(all, s)
			continue
		}
		if i > 0 {
			fmt.Fprintln(c.App.Writer)
		}
		if err := inspect.WriteText(c.App.Writer, s); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return inspect.WriteJSON(c.App.Writer, all)
	}
	return nil
}
