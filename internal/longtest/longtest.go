// Package longtest gates the test cases too slow for the README's test command: parity
// runs against sd-cli, sweeps and whole-pipeline renders. They run when SDTOOL_LONG=1,
// which .ci/run sets, so `go test ./...` stays within its two-minute promise on two cores.
package longtest

import (
	"os"
	"testing"
)

// Env is the environment variable that turns the long cases on.
const Env = "SDTOOL_LONG"

// Enabled reports whether the long cases run (SDTOOL_LONG=1).
func Enabled() bool { return os.Getenv(Env) == "1" }

// Skip skips tb unless the long cases are on, saying what the case is so a reader knows what was left out.
func Skip(tb testing.TB, what string) {
	tb.Helper()
	if !Enabled() {
		tb.Skipf("%s: a long case; set %s=1 to run it (.ci/run does)", what, Env)
	}
}
