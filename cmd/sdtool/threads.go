package main

import (
	"bytes"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"
)

// ggml's CPU workers wait for each other in spinning barriers, so a graph
// computed with more threads than there are idle cores collapses: on a
// two-core machine running other work, the tiny model took 5-12x longer
// with two threads than with one (BENCHMARKS.md). generate's default is
// therefore the cores that are idle when it starts, not all of them.

// idleSamples and idleGap are how often and how far apart the run queue is
// sampled: one reading of procs_running is noisy, the median of a few is not.
const (
	idleSamples = 5
	idleGap     = 10 * time.Millisecond
)

// ggmlThreads returns generate's --threads, or the default when it is unset.
func ggmlThreads(c *cli.Context) (int, error) {
	n, err := threadsOf(c)
	if n > 0 || err != nil {
		return n, err
	}
	n = defaultGGMLThreads()
	slog.Debug("ggml threads", "threads", n, "cpus", runtime.GOMAXPROCS(0))
	return n, nil
}

// defaultGGMLThreads returns generate's default thread count: the CPUs this
// process may use (GOMAXPROCS, which follows affinity and cgroup limits)
// minus the other runnable threads on the machine (the median of a few
// readings of /proc/stat's procs_running, which counts this process too),
// at least 1. Where /proc/stat is unreadable it is GOMAXPROCS.
func defaultGGMLThreads() int {
	return idleThreads(runtime.GOMAXPROCS(0), readProcsRunning, idleSamples, idleGap)
}

// idleThreads is defaultGGMLThreads with its inputs: cpus, a reader of the
// run queue length (false when unknown), and the sampling.
func idleThreads(cpus int, running func() (int, bool), samples int, gap time.Duration) int {
	var seen []int
	for i := range samples {
		if i > 0 {
			time.Sleep(gap)
		}
		if n, ok := running(); ok {
			seen = append(seen, n)
		}
	}
	if len(seen) == 0 {
		return cpus
	}
	slices.Sort(seen)
	others := max(seen[len(seen)/2]-1, 0) // the reading counts this process
	return min(max(cpus-others, 1), cpus)
}

// readProcsRunning reads the number of runnable threads from /proc/stat.
func readProcsRunning() (int, bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("procs_running ")); ok {
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			return n, err == nil
		}
	}
	return 0, false
}
