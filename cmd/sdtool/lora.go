package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/bytedance/sonic"
	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/merge"
	"github.com/sdtool/sdtool/pipeline"
)

func init() {
	register(&cli.Command{
		Name:  "lora",
		Usage: "LoRA adapters: extract one from two checkpoints (to bake adapters in, see sdtool merge --base --lora)",
		Description: "extract: the difference of two checkpoints, tuned - base, as a kohya-format LoRA (lora_up, lora_down\n" +
			"and alpha = rank per module; conv layers as LoCon kernels; kohya's module names for the family, so that\n" +
			"sd.cpp, ComfyUI, A1111 and sdtool merge --lora load it). Each weight of the diffusion model and the\n" +
			"text encoders that differs is decomposed by a truncated SVD (a randomized sketch with power iterations)\n" +
			"at --rank R, or at the fewest ranks that keep --energy E of its squared norm (up to --max-rank);\n" +
			"weights that are equal are left out. Layers are decomposed --threads at a time, each difference in\n" +
			"memory on its own, and the factors wait in a spill file beside OUT until it is written. The report\n" +
			"gives per layer the rank and the share of the difference kept; --json writes the schema in\n" +
			"docs/lora-extract-json.md. --sdcpp-only leaves out the few layers outside the blocks that\n" +
			"stable-diffusion.cpp's LoRA loader cannot map (SD's conv_in and time_embedding, Flux's img_in, ...).",
		Subcommands: []*cli.Command{
			{
				Name:      "extract",
				Usage:     "the difference of two checkpoints as a kohya-format LoRA, by truncated SVD per layer",
				ArgsUsage: "--base A --tuned B (--rank R | --energy E) -o LORA.safetensors",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "base", Usage: "the base checkpoint `A`"},
					&cli.StringFlag{Name: "tuned", Usage: "the tuned checkpoint `B` (the LoRA is B - A)"},
					&cli.IntFlag{Name: "rank", Aliases: []string{"r"}, Usage: "keep `R` singular values per layer"},
					&cli.Float64Flag{Name: "energy", Usage: "keep per layer the fewest ranks holding share `E` of the difference (0 < E <= 1)"},
					&cli.IntFlag{Name: "max-rank", Usage: "`N`: the most ranks --energy may keep", Value: 128},
					&cli.StringFlag{Name: "type", Value: "f16", Usage: "factor `TYPE`: f16, bf16 or f32"},
					&cli.BoolFlag{Name: "sdcpp-only", Usage: "leave out the layers stable-diffusion.cpp cannot load"},
					&cli.StringSliceFlag{Name: "filter", Usage: "extract only layers whose kohya module or tensor name matches `REGEX` (repeatable: any may match)"},
					&cli.Uint64Flag{Name: "seed", Usage: "`SEED` of the randomized sketch"},
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE` (.safetensors, or .gguf)"},
					&cli.BoolFlag{Name: "json", Usage: "write the report as JSON (docs/lora-extract-json.md)"},
					strictFlag(),
					threadsFlag("layers decomposed at once, `N`"),
					maxMemoryFlag(),
					&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
					&cli.BoolFlag{Name: "dry-run", Usage: "list the layers that would be extracted and write nothing"},
				},
				Action: runLoraExtract,
			},
		},
	},
		"sdtool lora extract --base testdata/tiny-sd1.safetensors --tuned testdata/tiny-sd1-tuned.safetensors --rank 2 -o out/lora.safetensors --dry-run",
	)
	registerNested("lora extract",
		"sdtool lora extract --base testdata/tiny-sd1.safetensors --tuned testdata/tiny-sd1-tuned.safetensors --rank 2 -o out/lora.safetensors",
		"sdtool lora extract --base testdata/tiny-sd1.safetensors --tuned testdata/tiny-sd1-tuned.safetensors --energy 0.9 --filter 'down_blocks' -o out/lora-down.safetensors --json",
	)
}

// extractReport is the --json report of lora extract (docs/lora-extract-json.md).
type extractReport struct {
	Base    string                 `json:"base"`
	Tuned   string                 `json:"tuned"`
	Output  string                 `json:"output"`
	DryRun  bool                   `json:"dry_run"`
	Rank    int                    `json:"rank,omitempty"`
	Energy  float64                `json:"energy,omitempty"`
	MaxRank int                    `json:"max_rank,omitempty"`
	Type    string                 `json:"type"`
	Layers  []merge.ExtractedLayer `json:"layers"`
	Skipped []string               `json:"skipped"`
	Totals  extractTotals          `json:"totals"`
}

type extractTotals struct {
	Layers    int     `json:"layers"`
	Extracted int     `json:"extracted"`
	Unchanged int     `json:"unchanged"`
	Kept      float64 `json:"kept"`
	Bytes     int64   `json:"bytes"`
}

func runLoraExtract(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("lora extract: unexpected arguments %q (give --base A --tuned B)", c.Args().Slice())
	}
	out := c.String("output")
	if out == "" {
		return errors.New("lora extract: no output (-o LORA.safetensors)")
	}
	ro, err := runOptions(c) // --threads and --max-memory, checked before any work
	if err != nil {
		return err
	}
	opts := &merge.ExtractOptions{
		Base: c.String("base"), Tuned: c.String("tuned"), Output: out,
		Rank: c.Int("rank"), Energy: c.Float64("energy"), MaxRank: c.Int("max-rank"), Type: c.String("type"),
		SDCppOnly: c.Bool("sdcpp-only"), Threads: ro.Threads, MaxMemory: ro.MaxMemory, Seed: c.Uint64("seed"), Log: slog.Default(),
	}
	if opts.Rank == 0 && opts.Energy == 0 {
		return errors.New("lora extract: give --rank R or --energy E")
	}
	for _, f := range c.StringSlice("filter") {
		re, err := regexp.Compile(f)
		if err != nil {
			return fmt.Errorf("lora extract: --filter %q: %v", f, err)
		}
		opts.Filters = append(opts.Filters, re)
	}
	e, err := merge.OpenExtract(opts)
	if err != nil {
		return err
	}
	defer e.Close()
	rep := &extractReport{Base: opts.Base, Tuned: opts.Tuned, Output: out, DryRun: c.Bool("dry-run"), Rank: opts.Rank,
		Energy: opts.Energy, Type: strings.ToLower(opts.Type), Skipped: e.Skipped}
	if opts.Rank == 0 {
		rep.MaxRank = max(opts.MaxRank, 0)
		if rep.MaxRank == 0 {
			rep.MaxRank = 128
		}
	}
	if rep.Skipped == nil {
		rep.Skipped = []string{}
	}
	if rep.DryRun {
		rep.Layers = e.Layers
		rep.Totals = totals(e)
		if c.Bool("json") {
			return writeJSON(c.App.Writer, rep)
		}
		if err := writeExtractText(c.App.Writer, rep); err != nil {
			return err
		}
		_, err := fmt.Fprintln(c.App.Writer, "nothing written (--dry-run)")
		return err
	}
	// Refuse a bad output before minutes of decomposition.
	if err := pipeline.CheckOutput(out, append(e.Inputs, readFiles(c)...), c.Bool("force")); err != nil {
		return err
	}
	ctx, stop := console.SignalContext()
	defer stop()
	bar := console.New("extract", e.Work())
	if err := e.Run(ctx, bar.Update); err != nil {
		bar.Abandon()
		return err
	}
	bar.Finish()
	plan, err := e.PlanOutput()
	if err != nil {
		return err
	}
	defer plan.Close()
	plan.Inputs = append(plan.Inputs, readFiles(c)...)
	wbar := console.New("write", 0)
	ro.Progress = wbar.Update
	if err := pipeline.Run(ctx, plan, ro); err != nil {
		wbar.Abandon()
		return err
	}
	wbar.Finish()
	rep.Layers = e.Layers
	rep.Totals = totals(e)
	rep.Totals.Bytes, _ = plan.Bytes()
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, rep); err != nil {
			return err
		}
	} else if err := writeExtractText(c.App.Writer, rep); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s, %s\n", out, pipeline.Count(len(plan.Outputs), "tensor", "tensors"), pipeline.HumanBytes(rep.Totals.Bytes))
	return err
}

func totals(e *merge.Extraction) extractTotals {
	t := extractTotals{Layers: len(e.Layers), Kept: e.Kept()}
	for _, l := range e.Layers {
		switch l.Status {
		case "extracted":
			t.Extracted++
		case "unchanged":
			t.Unchanged++
		}
	}
	return t
}

func writeJSON(w io.Writer, v any) error {
	b, err := sonic.ConfigStd.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeExtractText prints the per-layer table and a summary line.
func writeExtractText(w io.Writer, r *extractReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\trank\tkept\tshape\tsd.cpp\ttensors")
	for _, l := range r.Layers {
		if l.Status == "unchanged" {
			continue // counted in the summary line; --json lists them
		}
		kept, rank := "-", fmt.Sprint(l.Rank)
		switch l.Status {
		case "extracted":
			kept = fmt.Sprintf("%.2f%%", 100*l.Kept)
		case "planned":
			if l.Rank == 0 {
				rank = "by energy"
			}
		}
		sd := "yes"
		if !l.SDCpp {
			sd = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d x %v\t%s\t%s\n", l.Module, rank, kept, l.Rows, l.Inner, sd, strings.Join(l.Tensors, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Skipped tensors by reason, with the first of each.
	var reasons []string
	first, count := map[string]string{}, map[string]int{}
	for _, s := range r.Skipped {
		name, why, _ := strings.Cut(s, ": ")
		if count[why] == 0 {
			reasons = append(reasons, why)
			first[why] = name
		}
		count[why]++
	}
	for _, why := range reasons {
		fmt.Fprintf(w, "skipped %d: %s (first %s)\n", count[why], why, first[why])
	}
	how := fmt.Sprintf("rank %d", r.Rank)
	if r.Rank == 0 {
		how = fmt.Sprintf("energy %g (at most rank %d)", r.Energy, r.MaxRank)
	}
	t := r.Totals
	if r.DryRun {
		_, err := fmt.Fprintf(w, "%d layers to extract at %s\n", t.Layers, how)
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d layers extracted at %s (%d unchanged): %.2f%% of the difference kept\n",
		t.Extracted, t.Layers, how, t.Unchanged, 100*t.Kept)
	return err
}
