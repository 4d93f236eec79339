// Package peakrss measures a test's peak resident memory in a child
// process of its own, so that tests can hold memory flat in the size of the
// input: the parent runs the test binary again for one child test, the
// child does the work and reports its kernel high-water mark (Linux VmHWM).
package peakrss

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/procmem"
)

// marker prefixes the line a child prints with its peak.
const marker = "PEAKRSS_KB="

// Bytes returns the process's peak resident memory (VmHWM) in bytes, 0
// where it cannot be read.
func Bytes() int64 { return procmem.Peak() }

// ScratchDir returns a folder for a child's files: on tmpfs where there is
// one, whose file pages do not count toward the process's resident memory,
// else a test temporary folder. It is removed when t ends.
func ScratchDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "sdtool-peakrss"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// Measure runs the test named child of this binary in a child process with
// env added to its environment (and GOMAXPROCS=2), and returns the peak in
// KiB that the child reported with Report. It skips t where peaks cannot be
// read and fails it when the child fails or reports nothing.
func Measure(t testing.TB, child string, env ...string) int64 {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS is read from /proc/self/status")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.v")
	cmd.Env = append(append(os.Environ(), env...), "GOMAXPROCS=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", child, env, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), marker); ok {
			if kb, err := strconv.ParseInt(v, 10, 64); err == nil && kb > 0 {
				return kb
			}
		}
	}
	t.Fatalf("%s %v reported no peak:\n%s", child, env, out)
	return 0
}

// Growth measures child twice, with envSmall and then envBig added to its
// environment (each one VAR=VALUE), and returns both peaks in KiB: the
// memory tests run one job at two sizes and hold the difference, or its
// slope, to a limit.
func Growth(t testing.TB, child, envSmall, envBig string) (small, big int64) {
	t.Helper()
	return Measure(t, child, envSmall), Measure(t, child, envBig)
}

// Report prints the process's peak for Measure; a child test calls it
// when its work is done.
func Report(t testing.TB) {
	b := Bytes()
	if b == 0 {
		t.Fatal("VmHWM is not readable")
	}
	fmt.Printf("%s%d\n", marker, b>>10)
}
