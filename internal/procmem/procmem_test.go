package procmem

import (
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
