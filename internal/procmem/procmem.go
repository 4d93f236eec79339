// Package procmem reads the process's own memory figures. It imports no
// testing support, so the shipped binary can report its peak (generate
// prints it) without linking the test helpers that measure children.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// Peak returns the process's peak resident memory (Linux VmHWM) in bytes,
// 0 where it cannot be read.
func Peak() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Available returns the memory the kernel estimates is available for new
// work without swapping (Linux MemAvailable) in bytes, 0 where it cannot be read.
func Available() int64 {
	info, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(info)) {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
