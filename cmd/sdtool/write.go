package main

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/pipeline"
)

// threadsFlag is the --threads flag of a command whose default is every
// core; usage says what a thread does there, with the `N` placeholder.
func threadsFlag(usage string) cli.Flag {
	return &cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: usage + threadsBound, DefaultText: "all cores"}
}

// threadsBound is what --threads help says of maxThreads.
const threadsBound = " (at most twice the CPUs)"

// maxThreads bounds --threads at twice the CPUs this machine has: ggml's
// workers spin at barriers, so that far more threads than cores never
// finish a graph (200 on two cores ran past a minute, and ggml aborts past
// its 512), and every Go worker holds buffers of its own.
func maxThreads() int { return min(2*runtime.NumCPU(), 512) }

// strictFlag is the --strict flag of the writing commands other than
// quantize: every output's NaN and infinite values are counted and warned
// about, and --strict refuses them.
func strictFlag() cli.Flag {
	return &cli.BoolFlag{Name: "strict", Usage: "refuse an output that holds NaN or infinite values (a warning naming the tensors otherwise)"}
}

// maxMemoryFlag is the --max-memory flag of the writing commands: a size
// with or without a unit.
func maxMemoryFlag() cli.Flag {
	return &cli.StringFlag{Name: "max-memory", Usage: "`SIZE` of chunks in flight: bytes, or with a unit: " + pipeline.SizeUnits, DefaultText: "1GiB"}
}

// threadsOf returns --threads, refusing a negative count (0 and unset
// mean the command's default).
func threadsOf(c *cli.Context) (int, error) {
	n := c.Int("threads")
	if n < 0 || n > maxThreads() {
		return 0, fmt.Errorf("--threads %d: want 1 or more, at most %d (twice the %s here); leave it out for the default",
			n, maxThreads(), pipeline.Count(runtime.NumCPU(), "CPU", "CPUs"))
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
		// --strict refuses NaN, Inf and overflow in every output.
		StrictValues: c.Bool("strict"),
		Logger:       slog.Default(),
	}, nil
}

// jsonWriteFlag is the --json flag of the writing commands (convert,
// quantize, merge).
func jsonWriteFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print the plan and the file's size as JSON on stdout instead of the table and summary (docs/write-json.md)"}
}

// splitNote says which runtimes read a split GGUF: sd.cpp (97d2990) and
// ComfyUI-GGUF open one file and would miss the other shards' tensors.
const splitNote = "note: llama.cpp's loader reads split GGUFs; sd.cpp and ComfyUI-GGUF read one file: join the shards with `sdtool split --merge` before loading them there"

// writePlan prints plan for --dry-run, or writes it with a progress bar
// on a terminal, Ctrl-C cancelling cleanly, and prints what it wrote.
// With --json both print plan.Result, through wrap when the command adds
// fields of its own (nil: the Result as it is).
func writePlan(c *cli.Context, plan *pipeline.Plan, label string, wrap func(*pipeline.Result) any) error {
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
	dry, asJSON := c.Bool("dry-run"), c.Bool("json")
	printJSON := func() error {
		r, err := plan.Result(label, dry)
		if err != nil {
			return err
		}
		if wrap != nil {
			return writeJSON(c.App.Writer, wrap(r))
		}
		return writeJSON(c.App.Writer, r)
	}
	if dry {
		if asJSON {
			return printJSON()
		}
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
	if asJSON {
		return printJSON()
	}
	fmt.Fprint(c.App.ErrWriter, "wrote ")
	return plan.WriteSummary(c.App.ErrWriter)
}
