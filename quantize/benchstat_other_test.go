//go:build !unix

package quantize

import "time"

// cpuTime is unknown here: BenchmarkLadder leaves out its CPU ratio.
func cpuTime() time.Duration { return 0 }

// readBytes is unknown here: BenchmarkLadder leaves out its read figures.
func readBytes() int64 { return 0 }
