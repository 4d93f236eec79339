package inspect

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Clean returns s with every control character escaped: C0 and C1 controls
// (ESC, BEL, NUL, CSI, newlines, tabs), DEL, the bidirectional overrides
// and invalid UTF-8. Names, keys and values come from the file, so printed
// raw they could retitle or clear the terminal, forge lines or reorder what
// is shown.
func Clean(s string) string {
	if !strings.ContainsFunc(s, isControl) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && isControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case isControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// isControl reports the runes Clean escapes.
func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x2028 || r == 0x2029
}

// cleanWriter escapes, in everything written through it, the control
// characters Clean escapes except newlines and tabs, which the text layout
// itself uses: a safety net under the fields that are cleaned one by one.
type cleanWriter struct{ w io.Writer }

func (c cleanWriter) Write(p []byte) (int, error) {
	// Checked on the bytes: a string copy of every buffer flushed was as
	// much garbage as the whole output.
	if !bytes.ContainsFunc(p, func(r rune) bool { return r != '\n' && r != '\t' && isControl(r) }) {
		return c.w.Write(p)
	}
	s := string(p)
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		for k, cell := range strings.Split(strings.TrimSuffix(line, "\n"), "\t") {
			if k > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(Clean(cell))
		}
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	if _, err := io.WriteString(c.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}
