//go:build cgo

package native

import (
	"strings"
	"testing"
)

// TestLinkedLlamafileFollowsFlags checks that -UGGML_USE_LLAMAFILE in
// CGO_CFLAGS and CGO_CXXFLAGS (what `go run ./build` sets) takes llamafile
// out of the linked ggml, although the Go module's own cgo flags define it,
// and that without it llamafile is in.
func TestLinkedLlamafileFollowsFlags(t *testing.T) {
	flags, ok := buildSettings()
	if !ok {
		t.Skip("no build information in this test binary")
	}
	undef := func(k string) bool { return strings.Contains(flags[k], "-UGGML_USE_LLAMAFILE") }
	c, cxx := undef("CGO_CFLAGS"), undef("CGO_CXXFLAGS")
	if c != cxx {
		t.Skipf("-UGGML_USE_LLAMAFILE in only one of CGO_CFLAGS (%v) and CGO_CXXFLAGS (%v)", c, cxx)
	}
	if got, want := LinkedLlamafile(), !c; got != want {
		t.Errorf("LinkedLlamafile() = %v with CGO_CFLAGS=%q CGO_CXXFLAGS=%q, want %v", got, flags["CGO_CFLAGS"], flags["CGO_CXXFLAGS"], want)
	}
}
