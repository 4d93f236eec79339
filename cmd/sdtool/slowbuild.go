package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"sync"
)

// simdFlags are the C and C++ flags `go run ./build` sets for this CPU.
const simdFlags = "-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE"

// slowBuildFactor is how many times slower generate runs without ggml's
// SIMD kernels on a real model (SD 1.5, BENCHMARKS.md: 147.5 against 8.67
// s/step at 256x256 on one thread).
const slowBuildFactor = 15

// noteSlowBuild prints, on one line, that this binary's ggml lacks its SIMD
// kernels, how much slower that is, and the exact command that rebuilds it:
// `go run ./build` for a build made in the repository, a go install line
// with the flags for one installed from a module version. Nothing when the
// kernels are there.
func noteSlowBuild(w io.Writer, simd bool) {
	if simd {
		return
	}
	fmt.Fprintf(w, "note: this sdtool was built without ggml's SIMD kernels, so generate runs about %dx slower than it can; rebuild it with: %s\n",
		slowBuildFactor, rebuildCommand(moduleVersion()))
}

// noted holds the writers noteSlowBuildOnce has written to.
var noted sync.Map

// noteSlowBuildOnce is noteSlowBuild once per writer (once per process for
// os.Stderr, once per run in tests), however many images a run makes.
func noteSlowBuildOnce(w io.Writer, simd bool) {
	if _, seen := noted.LoadOrStore(w, true); !seen {
		noteSlowBuild(w, simd)
	}
}

// moduleVersion returns the module version the binary was built from
// ("" for a build in a source checkout).
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "(devel)" {
		return ""
	}
	return info.Main.Version
}

// rebuildCommand is the command that builds this version with the kernels.
func rebuildCommand(version string) string {
	if version == "" {
		return "go run ./build (in the repository)"
	}
	return fmt.Sprintf(`CGO_CFLAGS="%s" CGO_CXXFLAGS="%s" go install github.com/sdtool/sdtool/cmd/sdtool@%s`, simdFlags, simdFlags, version)
}
