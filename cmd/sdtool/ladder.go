package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
)

// runLadder writes one output per listed --type from one read of the
// input, then manifest.json beside them (quantize.PlanLadder).
func runLadder(c *cli.Context, opts *quantize.Options) error {
	types, err := quantize.SplitTypes(opts.Type)
	if err != nil {
		return err
	}
	ro, err := runOptions(c)
	if err != nil {
		return err
	}
	l, err := quantize.PlanLadder(opts, types)
	if err != nil {
		return err
	}
	defer l.Close()
	if c.Bool("dry-run") {
		for _, r := range l.Rungs {
			fmt.Fprintf(c.App.Writer, "== %s -> %s\n", r.Type, r.Plan.Path)
			if err := r.Plan.WriteTable(c.App.Writer); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintf(c.App.Writer, "nothing written (--dry-run; %s would list the files)\n", l.Manifest)
		return err
	}
	ctx, stop := console.SignalContext()
	defer stop()
	bar := console.New("quantize ladder", 0)
	ro.Progress = bar.Update
	man, err := l.Run(ctx, ro)
	if err != nil {
		bar.Abandon()
		return err
	}
	bar.Finish()
	for _, f := range man.Files {
		name := f.File
		if n := len(f.Shards); n > 0 {
			name = fmt.Sprintf("%s (%d shards)", f.File, n)
		}
		fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s, %.2f bits per weight, loads in %v\n", name, pipeline.HumanBytes(f.Size), f.BitsPerWeight, f.Loads)
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", l.Manifest)
	return nil
}
