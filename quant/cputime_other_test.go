//go:build !linux

package quant

import "time"

// threadCPU is not available off Linux.
func threadCPU() (time.Duration, bool) { return 0, false }
