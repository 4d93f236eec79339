package convert

import (
	"os"
	"syscall"
)

// peakRSS is the peak resident memory of a finished child process
// (getrusage's maxrss, in kilobytes on Linux).
func peakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) << 10
	}
	return 0
}
