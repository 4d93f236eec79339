package main

import (
	"fmt"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/pipeline"
)

// threadsFlag is the --threads flag of a command whose default is every
// core; usage says what a thread does there, with the `N` placeholder.
func threadsFlag(usage string) cli.Flag {
	return &cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: usage, DefaultText: "all cores"}
}

// maxMemoryFlag is the --max-memory flag of the writing commands: a size
// with or without a unit.
func maxMemoryFlag() cli.Flag {
	return &cli.StringFlag{Name: "max-memory", Usage: "`SIZE` of chunks in flight: bytes, or with a unit (512MiB, 2GiB)", DefaultText: "1GiB"}
}

// threadsOf returns --threads, refusing a negative count (0 and unset
// mean the command's default).
func threadsOf(c *cli.Context) (int, error) {
	n := c.Int("threads")
	if n < 0 {
		return 0, fmt.Errorf("--threads %d: want 1 or more (leave it out for the default)", n)
	}
	return n, nil
}

// runOptions are the pipeline settings every writing subcommand takes.
func runOptions(c *cli.Context) (pipeline.Options, error) {
	threads, err := threadsOf(c)
	if err != nil {
		return pipeline.Options{}, err
	}
	var maxMem int64
	if s := c.String("max-memory"); s != "" {
		if maxMem, err = pipeline.ParseBytes(s); err != nil {
			return pipeline.Options{}, fmt.Errorf("--max-memory: %v", err)
		}
		if maxMem == 0 {
			return pipeline.Options{}, fmt.Errorf("--max-memory %s: want more than 0 bytes", s)
		}
	}
	return pipeline.Options{
		Threads:   threads,
		MaxMemory: maxMem,
		Force:     c.Bool("force"),
		// --strict (quantize) also refuses NaN, Inf and overflow.
		StrictValues: c.Bool("strict"),
		Logger:       slog.Default(),
	}, nil
}

// splitNote says which runtimes read a split GGUF: sd.cpp (97d2990) and
// ComfyUI-GGUF open one file and would miss the other shards' tensors.
const splitNote = "note: llama.cpp's loader reads split GGUFs; sd.cpp and ComfyUI-GGUF read one file: join the shards with `sdtool split --merge` before loading them there"

// writePlan prints plan for --dry-run, or writes it with a progress bar
// on a terminal, Ctrl-C cancelling cleanly, and prints what it wrote.
func writePlan(c *cli.Context, plan *pipeline.Plan, label string) error {
	ro, err := runOptions(c)
	if err != nil {
		return err
	}
	plan.Inputs = append(plan.Inputs, readFiles(c)...)
	if !plan.Split.Active() {
		if plan.Split, err = splitLimits(c); err != nil {
			return err
		}
	}
	paths, shards, err := plan.Shards()
	if err != nil {
		return err
	}
	if len(paths) > 1 && plan.Format.Name == "gguf" {
		plan.Notes = append(plan.Notes, splitNote)
	}
	if c.Bool("dry-run") {
		if err := plan.WriteTable(c.App.Writer); err != nil {
			return err
		}
		for k, sh := range shards {
			fmt.Fprintf(c.App.Writer, "%s: %s, %d metadata keys\n", paths[k], pipeline.Count(sh.Count, "tensor", "tensors"), len(sh.Metadata))
		}
		_, err := fmt.Fprintln(c.App.Writer, "nothing written (--dry-run)")
		return err
	}
	ctx, stop := console.SignalContext()
	defer stop()
	bar := console.New(label, 0)
	ro.Progress = bar.Update
	if err := pipeline.Run(ctx, plan, ro); err != nil {
		bar.Abandon()
		return err
	}
	bar.Finish()
	fmt.Fprint(c.App.ErrWriter, "wrote ")
	return plan.WriteSummary(c.App.ErrWriter)
}
