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
	b := newBar(&buf, "writing out.gguf", 50<<20, 0)
	b.Update(10<<20, 50<<20)
	b.Finish()
	out := buf.String()
	// Binary units, as the summaries; a bar of its own width where the
	// terminal's is unknown (a buffer has none).
	for _, want := range []string{"writing out.gguf", "10/50 MiB", "100%", strings.Repeat("█", 8)} {
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
	if buf.Len() != 0 {
		t.Errorf("a bar with no total yet drew %q", buf.String())
	}
	b.Update(0, 0) // an empty output must not divide by zero
	b.Update(5<<20, 10<<20)
	if !strings.Contains(buf.String(), "10 MiB") || strings.Contains(buf.String(), "/ 1 B") {
		t.Errorf("new total not shown: %q", buf.String())
	}
	b.Abandon()
}

func TestStepsBar(t *testing.T) {
	var buf bytes.Buffer
	update, finish := stepsTo(&buf, true, "generate", 4)
	if buf.Len() != 0 {
		t.Errorf("drew %q before the first step", buf.String())
	}
	update(1, 4)
	out := buf.String()
	if !strings.Contains(out, "generate") || !strings.Contains(out, "1/4") || strings.Contains(out, "/hr") || strings.Contains(out, "step/") {
		t.Errorf("first frame %q", out)
	}
	finish()
	if u, f := stepsTo(&buf, false, "x", 1); u != nil {
		t.Error("a silent step bar has an update function")
	} else {
		f()
	}
}
