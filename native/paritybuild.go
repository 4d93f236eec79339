package native

import (
	"errors"
	"runtime"
	"runtime/debug"
	"slices"
)

// ErrNotParityBuild says the linked ggml was not compiled as sd-cli's is.
var ErrNotParityBuild = errors.New("native: the linked ggml is not built with go run ./build's flags " +
	`(export CGO_CFLAGS="-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE"; export CGO_CXXFLAGS="$CGO_CFLAGS")`)

// ParityBuild returns nil when the linked ggml computes as stable-diffusion.cpp's
// sd-cli does: compiled with the CPU's vector kernels and without llamafile's
// tinyBLAS. A plain `go test` build has neither property (ggml's scalar
// kernels are about 15 times slower and round differently), so a parity test
// run that way would measure the build, not sdtool; such tests skip with this
// error instead.
func ParityBuild() error {
	if !Available {
		return ErrNotParityBuild
	}
	if LinkedLlamafile() {
		return ErrNotParityBuild
	}
	if runtime.GOARCH == "amd64" && !slices.Contains(LinkedX86(), "AVX2") {
		return ErrNotParityBuild
	}
	// ggml's C++ half (its ops, repack and tinyBLAS) takes CGO_CXXFLAGS: a
	// build that set only CGO_CFLAGS links scalar C++ kernels.
	if flags, ok := buildSettings(); ok && flags["CGO_CFLAGS"] != flags["CGO_CXXFLAGS"] {
		return ErrNotParityBuild
	}
	return nil
}

// buildSettings are the binary's build settings (CGO_CFLAGS and the like)
// by key; false when the binary carries none.
func buildSettings() (map[string]string, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, false
	}
	flags := map[string]string{}
	for _, s := range info.Settings {
		flags[s.Key] = s.Value
	}
	return flags, true
}
