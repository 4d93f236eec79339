package console

import (
	"bytes"
	"strings"
	"testing"
)

func TestSilentWhenDisabled(t *testing.T) {
	var buf bytes.Buffer
	b := NewTo(&buf, false, "writing", 1<<20)
	b.Update(1<<19, 1<<20)
	b.Finish()
	b.Abandon()
	if b.Enabled() || buf.Len() != 0 {
		t.Fatalf("silent bar wrote %q", buf.String())
	}
}

func TestRendersBytes(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, "writing out.gguf", 50e6, 0)
	b.Update(10e6, 50e6)
	b.Finish()
	out := buf.String()
	for _, want := range []string{"writing out.gguf", "10/50 MB", "100%"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q: %q", want, out)
		}
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("finished bar does not end its line: %q", out)
	}
}

func TestTotalChangesAndEmpty(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, "x", 0, 0)
	b.Update(0, 0) // an empty output must not divide by zero
	b.Update(5e6, 10e6)
	if !strings.Contains(buf.String(), "10 MB") {
		t.Errorf("new total not shown: %q", buf.String())
	}
	b.Abandon()
}
