//go:build !linux

package convert

import "os"

// peakRSS is unknown (0) off Linux.
func peakRSS(*os.ProcessState) int64 { return 0 }
