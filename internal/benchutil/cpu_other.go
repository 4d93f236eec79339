//go:build !unix

package benchutil

import (
	"os"
	"time"
)

// CPUTime is unknown here (0): benchmarks leave out their CPU ratios.
func CPUTime() time.Duration { return 0 }

// ChildPeakRSS is unknown here (0).
func ChildPeakRSS(*os.ProcessState) int64 { return 0 }
