package main

import (
	"fmt"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/pipeline"
)

// runOptions are the pipeline settings every writing subcommand takes.
func runOptions(c *cli.Context) pipeline.Options {
	return pipeline.Options{
		Threads:   c.Int("threads"),
		MaxMemory: c.Int64("max-memory"),
		Force:     c.Bool("force"),
		Logger:    slog.Default(),
	}
}

// writePlan prints plan for --dry-run, or writes it with a progress bar
// on a terminal, Ctrl-C cancelling cleanly, and prints what it wrote.
func writePlan(c *cli.Context, plan *pipeline.Plan, label string) error {
	if c.Bool("dry-run") {
		if err := plan.WriteTable(c.App.Writer); err != nil {
			return err
		}
		_, err := fmt.Fprintln(c.App.Writer, "nothing written (--dry-run)")
		return err
	}
	ctx, stop := console.SignalContext()
	defer stop()
	bar := console.New(label, 0)
	ro := runOptions(c)
	ro.Progress = bar.Update
	if err := pipeline.Run(ctx, plan, ro); err != nil {
		bar.Abandon()
		return err
	}
	bar.Finish()
	fmt.Fprint(c.App.ErrWriter, "wrote ")
	return plan.WriteSummary(c.App.ErrWriter)
}
