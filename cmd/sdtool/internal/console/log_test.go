package console

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Warnings are one "warning: ..." line each, printed once however often
// they are logged; with -v, records below warnings stay logfmt lines.
func TestLogHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(NewLogHandler(&b, slog.LevelWarn))
	for range 3 {
		log.Warn("requantizing 23 tensors", "file", "a.gguf")
	}
	log.With("tensor", "x").Warn("non-finite values", "count", 2, "why", "a b")
	log.Error("broken")
	log.Info("hidden")
	want := "warning: requantizing 23 tensors (file=a.gguf)\nwarning: non-finite values (tensor=x, count=2, why=\"a b\")\nerror: broken\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	log = slog.New(NewLogHandler(&b, slog.LevelDebug))
	log.Debug("plan", "tensors", 3)
	if !strings.Contains(b.String(), "level=DEBUG msg=plan tensors=3") {
		t.Errorf("debug record %q", b.String())
	}
}
