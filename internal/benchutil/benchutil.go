package benchutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/peakrss"
	"github.com/sdtool/sdtool/internal/synth"
)

// SizeMB returns the benchmark model size from SDTOOL_BENCH_MB (default
// def, at most 8192).
func SizeMB(def int64) (int64, error) {
	s := os.Getenv("SDTOOL_BENCH_MB")
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v > 8192 {
		return 0, fmt.Errorf("SDTOOL_BENCH_MB=%q: want 1..8192", s)
	}
	return v, nil
}

// F16Spec returns a synthetic F16 Flux-layout model (rows of 512, so every
// linear weight takes k-quants) with as many blocks as fit in mb megabytes.
func F16Spec(mb int64) (synth.Spec, error) {
	best := synth.Spec{Arch: "flux", Scale: 1.0 / 6, Depth: 1, DType: formats.F16, Seed: 3}
	scale := []float64{1.0 / 6, 1.0 / 3, 2.0 / 3, 1}
	for _, sc := range scale {
		for d := 1; d <= 57; d++ {
			s := best
			s.Scale, s.Depth = sc, d
			n, err := synth.Params(s)
			if err != nil {
				return best, err
			}
			if 2*n > mb<<20 {
				return best, nil
			}
			best = s
		}
	}
	return best, nil
}

var cache struct {
	sync.Mutex
	paths map[int64]string
}

// F16Model writes (once per process and size) the F16Spec model of mb
// megabytes in a temporary folder and returns its path and size.
func F16Model(mb int64) (string, int64, error) {
	cache.Lock()
	defer cache.Unlock()
	if cache.paths == nil {
		cache.paths = map[int64]string{}
	}
	path, ok := cache.paths[mb]
	if !ok {
		spec, err := F16Spec(mb)
		if err != nil {
			return "", 0, err
		}
		dir, err := os.MkdirTemp("", "sdtool-bench")
		if err != nil {
			return "", 0, err
		}
		path = filepath.Join(dir, fmt.Sprintf("bench-f16-%dMB.safetensors", mb))
		if err := synth.Write(path, spec); err != nil {
			return "", 0, err
		}
		cache.paths[mb] = path
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	return path, st.Size(), nil
}

// ResetPeakRSS clears the kernel's high-water mark of resident memory
// (Linux: "5" in /proc/self/clear_refs), so that each benchmark reports its
// own peak; it reports false where that is not possible.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// CPUSeconds returns CPUTime in seconds.
func CPUSeconds() float64 { return CPUTime().Seconds() }

// PeakRSS returns VmHWM from /proc/self/status in bytes, 0 when unknown.
func PeakRSS() int64 { return peakrss.Bytes() }

// RunChild runs this test binary again as a child that runs only the test
// named test, with env added to its environment, and returns the
// measurements the child printed as BENCH_NAME=VALUE lines; a child that
// fails or prints no BENCH_PEAK_MB is an error carrying its output. A
// child process gives each measurement its own peak resident memory.
func RunChild(test string, env ...string) (map[string]float64, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("child %s: %v\n%s", test, err, out)
	}
	vals := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && strings.HasPrefix(k, "BENCH_") {
			vals[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	if vals["BENCH_PEAK_MB"] == 0 {
		return nil, fmt.Errorf("child %s printed no measurement:\n%s", test, out)
	}
	return vals, nil
}
