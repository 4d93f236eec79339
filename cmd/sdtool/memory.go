package main

import (
	"errors"
	"fmt"
	"image"
	"math"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/procmem"
	"github.com/sdtool/sdtool/pipeline"
)

// The memory budget of generate and report: weights that do not fit are
// streamed from their files per block (infer's stream.go).

// renderMemoryFlag is --max-memory of generate and report.
func renderMemoryFlag() cli.Flag {
	return &cli.StringFlag{Name: "max-memory", Usage: "memory budget `SIZE` (512MiB, 8GiB, 0 for none) for the weights and ggml's compute buffers: " +
		"what fits stays in memory, the other blocks are read from the files as each step needs them",
		DefaultText: "half of the memory available, read when each model loads and again as its graphs need weights"}
}

// memoryBudget reads --max-memory, else the default budget of the memory
// available now (no budget where that cannot be read). Without the flag it
// is read again before each model loads (--compare's reference, each file
// of a report), so that a run that takes hours follows the memory that
// other programs leave it.
func memoryBudget(c *cli.Context) (int64, error) {
	if s := c.String("max-memory"); s != "" {
		n, err := pipeline.ParseBytes(s)
		if err != nil {
			return 0, fmt.Errorf("--max-memory: %w", err)
		}
		return n, nil
	}
	return defaultBudget(procmem.Available()), nil
}

// rebudget is infer's LoadOptions.Rebudget for the default budget (nil
// with --max-memory): before a graph reads weights it lacks, half of the
// memory available then and of what the model holds, so that a render
// of many minutes per step shrinks its budget as other programs grow
// (never above the budget it started with).
func rebudget(c *cli.Context) func(holding int64) int64 {
	if c.String("max-memory") != "" {
		return nil
	}
	return func(holding int64) int64 {
		a := procmem.Available()
		if a <= 0 {
			return math.MaxInt64 // unreadable now: the budget stays
		}
		return defaultBudget(a + holding)
	}
}

// defaultBudget is the budget without --max-memory, given the memory
// available (0 or less: unknown, no budget): half of it, in whole MiB.
// Three quarters was the rule until a Flux.1 dev --compare on a 24 GiB
// machine was OOM-killed twice while other programs grew during its
// minutes per step; the other half is left to their growth, to the page
// cache the streamed reads pass through, and to what the process holds
// outside the budget (its own code, Go runtime and tables: 30-70 MiB
// measured on the tiny models and on a Flux of full widths, BENCHMARKS.md). A budget is never 0 (none)
// when some memory is available: a tiny one is refused naming the block.
func defaultBudget(available int64) int64 {
	if available <= 0 {
		return 0
	}
	b := available / 2
	if b >= 1<<20 {
		b &^= 1<<20 - 1
	}
	return max(b, 1)
}

// budgetHint says which flag sets a budget that is too small.
func budgetHint(err error) error {
	var be *infer.BudgetError
	if errors.As(err, &be) {
		return fmt.Errorf("%w: give --max-memory %s or more", err, pipeline.HumanBytes(2*be.Bytes+be.Compute))
	}
	return err
}

// resultBytes is what a render holds in memory: its pixels, latent and
// captured block outputs (float32 each).
func resultBytes(res *infer.Result) int64 {
	n := len(res.Pixels) + len(res.Latent)
	for _, b := range res.Blocks {
		n += len(b.Values)
	}
	return 4 * int64(n)
}

// imageBytes is what decoded images hold (4 bytes a pixel, RGBA).
func imageBytes(imgs []image.Image) int64 {
	var n int64
	for _, img := range imgs {
		n += 4 * int64(img.Bounds().Dx()) * int64(img.Bounds().Dy())
	}
	return n
}

// memorySummary says how the weights were held, for the summary line.
func memorySummary(m *infer.Model) string {
	st := m.Memory()
	s := ", weights " + pipeline.HumanBytes(st.Resident) + " resident"
	if st.Streamed > 0 {
		s += fmt.Sprintf(", %s streamed (%s, slots %s, waited %s)", pipeline.HumanBytes(st.Streamed),
			pipeline.Count(st.StreamedGroups, "block", "blocks"), pipeline.HumanBytes(st.Slots), round(st.Waited))
	}
	if st.Budget > 0 {
		s += " within " + pipeline.HumanBytes(st.Budget)
		if st.Held > 0 {
			s += " less " + pipeline.HumanBytes(st.Held) + " of renders kept"
		}
	}
	return s
}
