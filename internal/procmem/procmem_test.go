package procmem

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// A process that has touched a few MiB has a peak at least that large.
func TestPeakCoversTouchedMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is read from /proc/self/status")
	}
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	if p := Peak(); p < int64(len(buf)) {
		t.Errorf("Peak() = %d bytes after touching %d", p, len(buf))
	}
	runtime.KeepAlive(buf)
}

// The available memory is positive and no more than the machine's total.
func TestAvailableWithinTotal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("MemAvailable is read from /proc/meminfo")
	}
	a := Available()
	info, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var totalKB int64
	if _, err := fmt.Sscanf(string(info), "MemTotal: %d kB", &totalKB); err != nil {
		t.Fatal(err)
	}
	if a <= 0 || a > totalKB<<10 {
		t.Errorf("Available() = %d bytes, MemTotal %d kB", a, totalKB)
	}
}
