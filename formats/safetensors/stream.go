package safetensors

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"
)

// headerPiece is the size of the pieces a header is read in: it is read
// twice, a piece at a time (scanHeader, then the tokenizer), never whole,
// so that a header of many tensors costs its descriptors, not its text too.
const headerPiece = 1 << 20

// headerScan is what the first pass over a header finds: what the checks
// before tokenizing need, as they would see the whole header.
type headerScan struct {
	invalidAt int64  // offset of the first invalid UTF-8 byte, -1 if none
	lead      int64  // whitespace bytes before the first other byte
	head      string // up to 17 bytes from the first other byte ("" if none)
	offsets   int    // occurrences of "data_offsets" with its quotes
}

// scanHeader reads the n header bytes of r at off in pieces of piece bytes
// and scans them: UTF-8 validity, leading whitespace, the first bytes after
// it and a count of "data_offsets" keys (which sizes the tables).
func scanHeader(r io.ReaderAt, off, n int64, piece int) (headerScan, error) {
	const key = `"data_offsets"`
	sc := headerScan{invalidAt: -1}
	buf := make([]byte, 0, min(int64(piece), n)+utf8.UTFMax)
	var tail string // the last len(key)-1 bytes, for keys split across pieces
	inLead := true
	for done := int64(0); done < n; {
		k := min(int64(piece), n-done)
		carry := len(buf) // an incomplete rune left from the last piece
		buf = buf[:carry+int(k)]
		if err := readFullAt(r, buf[carry:], off+done); err != nil {
			return sc, err
		}
		base := done - int64(carry) // offset of buf in the header
		done += k
		last := done == n
		// UTF-8: a valid piece ends on a rune; otherwise find the first bad
		// byte, or the rune the next piece completes.
		keep := 0
		if sc.invalidAt < 0 && !utf8.Valid(buf) {
			for i := 0; i < len(buf); {
				if !last && !utf8.FullRune(buf[i:]) {
					keep = len(buf) - i
					break
				}
				r, sz := utf8.DecodeRune(buf[i:])
				if r == utf8.RuneError && sz <= 1 {
					sc.invalidAt = base + int64(i)
					break
				}
				i += sz
			}
		}
		text := buf[carry:] // this piece's bytes, for the other scans
		if inLead {
			i := 0
			for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n') {
				i++
			}
			sc.lead += int64(i)
			if i < len(text) {
				inLead = false
				text = text[i:]
			}
		}
		if !inLead && len(sc.head) < 17 {
			sc.head += string(text[:min(len(text), 17-len(sc.head))])
		}
		// Keys inside the piece, and those across its start (the tail is
		// too short to hold one): no copy of the piece.
		own := buf[carry:]
		sc.offsets += bytes.Count(own, []byte(key))
		edge := tail + string(own[:min(len(own), len(key)-1)])
		sc.offsets += strings.Count(edge, key)
		if len(own) >= len(key)-1 {
			tail = string(own[len(own)-(len(key)-1):])
		} else {
			tail = edge[max(0, len(edge)-(len(key)-1)):]
		}
		buf = append(buf[:0], buf[len(buf)-keep:]...)
	}
	return sc, nil
}

// pieces returns a source of the n bytes of r at off, piece bytes at a
// time, for newStreamTokenizer: each call returns the tail it is given and
// the next piece, read into one new string; "" and io.EOF at the end.
func pieces(r io.ReaderAt, off, n int64, piece int) func(tail string) (string, error) {
	done := int64(0)
	return func(tail string) (string, error) {
		if done >= n {
			return "", io.EOF
		}
		k := min(int64(piece), n-done)
		var b strings.Builder
		b.Grow(len(tail) + int(k))
		b.WriteString(tail)
		if got, err := io.Copy(&b, io.NewSectionReader(r, off+done, k)); got != k {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		done += k
		return b.String(), nil
	}
}
