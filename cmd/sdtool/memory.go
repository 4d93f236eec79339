package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/internal/procmem"
	"github.com/sdtool/sdtool/pipeline"
)

// The memory budget of generate and report: weights that do not fit are
// streamed from their files per block (infer's stream.go).

// memoryShare is the part of the memory available at start that the
// default budget takes: the rest is left to the Go heap, the page cache
// the streamed reads go through and the other programs running.
const memoryShare = 0.75

// renderMemoryFlag is --max-memory of generate and report.
func renderMemoryFlag() cli.Flag {
	return &cli.StringFlag{Name: "max-memory", Usage: "memory budget `SIZE` (512MiB, 8GiB, 0 for none) for the weights and ggml's compute buffers: " +
		"what fits stays in memory, the other blocks are read from the files as each step needs them",
		DefaultText: "three quarters of the memory available when the command starts"}
}

// memoryBudget reads --max-memory, else the default share of the memory
// available now (no budget where that cannot be read).
func memoryBudget(c *cli.Context) (int64, error) {
	if s := c.String("max-memory"); s != "" {
		n, err := pipeline.ParseBytes(s)
		if err != nil {
			return 0, fmt.Errorf("--max-memory: %w", err)
		}
		return n, nil
	}
	return int64(float64(procmem.Available()) * memoryShare), nil
}

// budgetHint says which flag sets a budget that is too small.
func budgetHint(err error) error {
	var be *infer.BudgetError
	if errors.As(err, &be) {
		return fmt.Errorf("%w: give --max-memory %s or more", err, pipeline.HumanBytes(2*be.Bytes+be.Compute))
	}
	return err
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
	}
	return s
}
