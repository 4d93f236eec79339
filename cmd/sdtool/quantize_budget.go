package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
)

// budgetTypesDefault is the --budget-types default as --help shows it.
func budgetTypesDefault() string {
	names := make([]string, len(quantize.DefaultCandidates))
	for i, t := range quantize.DefaultCandidates {
		names[i] = t.String()
	}
	return strings.Join(names, ",")
}

// budgetOptions reads --budget, --bpw, --budget-types and --budget-metric
// into opts.Budget (left nil when neither size flag is given).
func budgetOptions(c *cli.Context, opts *quantize.Options) error {
	size, bpw := c.String("budget"), c.Float64("bpw")
	if size == "" && !c.IsSet("bpw") {
		for _, f := range []string{"budget-types", "write-rules", "write-type-file"} {
			if c.IsSet(f) {
				return fmt.Errorf("--%s applies to --budget or --bpw", f)
			}
		}
		return nil
	}
	b := &quantize.Budget{BPW: bpw, Metric: c.String("budget-metric")}
	if size != "" {
		n, err := pipeline.ParseBytes(size)
		if err != nil {
			return fmt.Errorf("--budget: %v", err)
		}
		if n == 0 {
			return fmt.Errorf("--budget %s: want more than 0 bytes", size)
		}
		b.Bytes = n
	} else if !(bpw > 0) {
		return fmt.Errorf("--bpw %g: want more than 0 bits per weight", bpw)
	}
	if s := c.String("budget-types"); s != "" {
		for _, name := range strings.Split(s, ",") {
			t, err := formats.LookupType(strings.TrimSpace(name))
			if err != nil {
				return fmt.Errorf("--budget-types: %v", err)
			}
			b.Candidates = append(b.Candidates, t)
		}
	}
	threads, err := threadsOf(c)
	if err != nil {
		return err
	}
	b.Threads = threads
	opts.Budget = b
	return nil
}

// watchBudget makes a budget's measurement, which reads the whole input
// before anything is written, visible and interruptible: on a terminal a
// line saying what it measures and a progress bar (elsewhere -v logs it),
// and Ctrl-C stopping it with what was done. The returned function ends
// the bar with the planning's error (nil when it succeeded).
func watchBudget(c *cli.Context, b *quantize.Budget) func(error) {
	if b == nil {
		return func(error) {}
	}
	ctx, stop := console.SignalContext()
	bar := console.New("measuring", 0)
	b.Context, b.Progress = ctx, bar.Update
	if bar.Enabled() {
		b.Start = func(tensors int, bytes int64) {
			fmt.Fprintf(c.App.ErrWriter, "budget: measuring %s (%s of the input) in each candidate type\n",
				pipeline.Count(tensors, "tensor", "tensors"), pipeline.HumanBytes(bytes))
		}
	}
	return func(err error) {
		if err != nil {
			bar.Abandon()
		} else {
			bar.Finish()
		}
		stop()
	}
}

// writeRecipe writes the budget's choice where --write-rules and
// --write-type-file ask, through the one atomic publish (.partial, then a
// rename). With check it only checks that the paths may be written (res
// may then be nil).
func writeRecipe(c *cli.Context, res *quantize.Report, inputs []string, check bool) error {
	var rc quantize.Recipe
	if !check {
		rc = res.Recipe()
	}
	for _, out := range []struct {
		flag  string
		write func(w io.Writer) error
	}{
		{"write-rules", func(w io.Writer) error { _, err := fmt.Fprintln(w, rc.Rules()); return err }},
		{"write-type-file", rc.WriteTypeFile},
	} {
		path := c.String(out.flag)
		if path == "" {
			continue
		}
		// Every file the command reads (all shards of the model, imatrix and
		// type files) and the model output are off limits.
		po := pipeline.PublishOptions{Force: c.Bool("force"), Inputs: append(slices.Clone(inputs), c.String("output"))}
		if check {
			if err := pipeline.CheckOutput(path, po.Inputs, po.Force); err != nil {
				return fmt.Errorf("--%s: %w", out.flag, err)
			}
			continue
		}
		if err := pipeline.WriteAtomic(context.Background(), path, po, out.write); err != nil {
			return fmt.Errorf("--%s: %w", out.flag, err)
		}
		fmt.Fprintf(c.App.ErrWriter, "wrote %s (%s)\n", path, pipeline.Count(len(rc), "tensor type", "tensor types"))
	}
	return nil
}
