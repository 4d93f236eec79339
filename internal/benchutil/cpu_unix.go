//go:build unix

package benchutil

import "syscall"

// CPUSeconds returns the user and system CPU time of the process so far:
// on a shared machine, work per CPU second says more than per wall second.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
