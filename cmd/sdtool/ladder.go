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
	// Every rung and the manifest are outputs: none may be a file the
	// command reads (an --imatrix file, any shard) or another rung.
	var outs []writtenFile
	for _, r := range l.Rungs {
		r.Plan.Inputs = append(r.Plan.Inputs, readFiles(c)...)
		outs = append(outs, writtenFile{"the " + r.Type + " file", r.Plan.Path})
	}
	if err := checkWritten(c, l.Rungs[0].Plan.Inputs, append(outs, writtenFile{"the ladder's manifest", l.Manifest})...); err != nil {
		return err
	}
	asJSON := c.Bool("json")
	if c.Bool("dry-run") {
		if asJSON {
			return writeLadderJSON(c, l, true)
		}
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
	if asJSON {
		return writeLadderJSON(c, l, false)
	}
	for i, f := range man.Files {
		name := l.Rungs[i].Plan.Path
		if n := len(f.Shards); n > 0 {
			name = fmt.Sprintf("%s (%d shards)", name, n)
		}
		fmt.Fprintf(c.App.ErrWriter, "wrote %s: file %s (%d bytes), %.2f bits per weight, loads in %v\n", name, pipeline.HumanBytes(f.Size), f.Size, f.BitsPerWeight, f.Loads)
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", l.Manifest)
	return nil
}

// ladderResult is a ladder's --json: every rung as quantize's --json gives
// one file, and the manifest's path (docs/write-json.md).
type ladderResult struct {
	// DryRun is true when nothing was written.
	DryRun bool `json:"dry_run"`
	// Manifest is the path of manifest.json (written unless DryRun).
	Manifest string `json:"manifest"`
	// Files are the rungs in --type order.
	Files []quantizeResult `json:"files"`
}

// writeLadderJSON prints the ladder's plans as ladderResult.
func writeLadderJSON(c *cli.Context, l *quantize.Ladder, dry bool) error {
	out := ladderResult{DryRun: dry, Manifest: l.Manifest, Files: []quantizeResult{}}
	for _, r := range l.Rungs {
		res, err := r.Plan.Result("quantize", dry)
		if err != nil {
			return err
		}
		out.Files = append(out.Files, quantizeResult{Result: res, Consumers: orEmpty(r.Report.Consumers), Warnings: orEmpty(r.Report.Warnings)})
	}
	return writeJSON(c.App.Writer, out)
}
