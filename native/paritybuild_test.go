//go:build cgo

package native

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// TestParityBuildFollowsFlags checks ParityBuild against the flags this test
// binary was built with: go run ./build's flags pass, a plain build (no
// -march, llamafile on) does not.
func TestParityBuildFollowsFlags(t *testing.T) {
	flags, ok := buildSettings()
	if !ok {
		t.Skip("no build information in this test binary")
	}
	both := func(sub string) bool {
		return strings.Contains(flags["CGO_CFLAGS"], sub) && strings.Contains(flags["CGO_CXXFLAGS"], sub)
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the vector-kernel check is written for amd64")
	}
	plain := !strings.Contains(flags["CGO_CFLAGS"], "-march") && !strings.Contains(flags["CGO_CFLAGS"], "-UGGML_USE_LLAMAFILE")
	parity := both("-march=native") && both("-UGGML_USE_LLAMAFILE")
	err := ParityBuild()
	switch {
	case plain && !errors.Is(err, ErrNotParityBuild):
		t.Errorf("ParityBuild() = %v under CGO_CFLAGS=%q, want ErrNotParityBuild", err, flags["CGO_CFLAGS"])
	case parity && err != nil:
		t.Errorf("ParityBuild() = %v under CGO_CFLAGS=%q, want nil", err, flags["CGO_CFLAGS"])
	case !plain && !parity:
		t.Skipf("CGO_CFLAGS=%q is neither a plain build nor go run ./build's", flags["CGO_CFLAGS"])
	}
}
