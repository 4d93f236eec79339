//go:build unix

package names

import "syscall"

// cpuNanos returns the CPU time this process has used, so benchmarks can
// report cost per name even when the machine is shared and wall time is not.
func cpuNanos() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
