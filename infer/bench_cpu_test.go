//go:build cgo

package infer

import (
	"os"
	"os/exec"
	"testing"
)

// sdcliRun is sdcliStepAndPeak that also returns the process's CPU seconds
// (user and system), a measure that other programs on the machine disturb
// far less than the wall clock: the benchmarks against sd-cli report its
// ratio beside the step time's.
func sdcliRun(tb testing.TB, bin string, args []string, steps int) (step float64, peak int64, cpu float64) {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("sd-cli: %v\n%s", err, tail(log))
	}
	return sdcliStepSeconds(tb, log, steps), maxRSS(cmd.ProcessState), cpuSeconds(cmd.ProcessState)
}

// cpuSeconds is a finished process's user and system CPU time in seconds.
func cpuSeconds(ps *os.ProcessState) float64 {
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}
