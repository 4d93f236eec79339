package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// LogHandler is the slog handler of the command line: a warning is one
// line "warning: MESSAGE (key=value, ...)", the format of the warnings the
// commands print themselves, and the same warning is printed once however
// often it is logged (a ladder plans every rung from the same input, and
// each would say it again); below warnings, records (-v) are logfmt lines
// from slog's text handler.
type LogHandler struct {
	state *logState
	text  slog.Handler
	attrs []slog.Attr
}

// logState is what the handlers derived by WithAttrs share.
type logState struct {
	mu    sync.Mutex
	w     io.Writer
	level slog.Level
	seen  map[string]bool
}

// NewLogHandler returns a handler writing to w records at level and above.
func NewLogHandler(w io.Writer, level slog.Level) *LogHandler {
	return &LogHandler{
		state: &logState{w: w, level: level, seen: map[string]bool{}},
		text:  slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}),
	}
}

// Enabled reports whether records of level are written.
func (h *LogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.state.level
}

// Handle writes r: a warning or error in sdtool's format, once; anything
// else as the text handler writes it.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.text.Handle(ctx, r)
	}
	var kv []string
	add := func(a slog.Attr) bool {
		if v := a.Value.Resolve(); !v.Equal(slog.Value{}) {
			s := fmt.Sprint(v.Any())
			if s == "" || strings.ContainsAny(s, " ,()\"=") {
				s = strconv.Quote(s)
			}
			kv = append(kv, a.Key+"="+s)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	word := "warning"
	if r.Level >= slog.LevelError {
		word = "error"
	}
	line := word + ": " + r.Message
	if len(kv) > 0 {
		line += " (" + strings.Join(kv, ", ") + ")"
	}
	s := h.state
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[line] {
		return nil
	}
	s.seen[line] = true
	_, err := fmt.Fprintln(s.w, line)
	return err
}

// WithAttrs returns a handler that adds attrs to every record.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogHandler{state: h.state, text: h.text.WithAttrs(attrs), attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

// WithGroup returns a handler whose text records nest under name; warnings
// name their attributes without the group.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{state: h.state, text: h.text.WithGroup(name), attrs: h.attrs}
}
