package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestNoteSlowBuild(t *testing.T) {
	var b bytes.Buffer
	noteSlowBuild(&b, true)
	if b.Len() != 0 {
		t.Errorf("a SIMD build printed %q", b.String())
	}
	noteSlowBuild(&b, false)
	if s := b.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "15x slower") || !strings.Contains(s, "go run ./build") {
		t.Errorf("plain build note %q", s)
	}
	if got := rebuildCommand("v1.2.3"); got != `CGO_CFLAGS="-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE" CGO_CXXFLAGS="-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE" go install github.com/sdtool/sdtool/cmd/sdtool@v1.2.3` {
		t.Errorf("rebuild command for an installed version: %s", got)
	}
}
