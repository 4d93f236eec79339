//go:build unix

package benchutil

import (
	"os"
	"runtime"
	"syscall"
	"time"
)

// CPUTime returns the user and system CPU time of the process so far: on a
// shared machine, work per CPU second says more than per wall second.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ChildPeakRSS returns the peak resident memory of a finished child
// process in bytes (getrusage's maxrss, KiB on Linux), 0 when unknown
// (other systems count maxrss in other units).
func ChildPeakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && runtime.GOOS == "linux" {
		return int64(ru.Maxrss) << 10
	}
	return 0
}
