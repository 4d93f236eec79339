//go:build !unix

package names

// cpuNanos is not available here; benchmarks then report wall time only.
func cpuNanos() int64 { return 0 }
