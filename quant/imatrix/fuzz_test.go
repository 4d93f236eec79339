package imatrix

import (
	"bytes"
	"math"
	"testing"

	"github.com/sdtool/sdtool/formats/gguf"
)

// FuzzReadDat feeds arbitrary bytes to the legacy .dat reader: it must not
// panic, and whatever it accepts must write back to a file that reads to
// the same entries.
func FuzzReadDat(f *testing.F) {
	f.Add(datBytes([]struct {
		name  string
		ncall int32
		vals  []float32
	}{{"a.weight", 10, []float32{3.1, 1.6}}, {"b", 1, []float32{0}}}, true))
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0, 'x', 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 128, 63})
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadDat(bytes.NewReader(data), "fuzz.dat", int64(len(data)))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteDat(&out, m); err != nil {
			t.Fatal(err)
		}
		back, err := ReadDat(bytes.NewReader(out.Bytes()), "again.dat", int64(out.Len()))
		if err != nil {
			t.Fatalf("rewritten file does not read: %v", err)
		}
		if len(back.Entries) != len(m.Entries) {
			t.Fatalf("%d entries, then %d", len(m.Entries), len(back.Entries))
		}
		for i, e := range m.Entries {
			b := back.Entries[i]
			if b.Name != e.Name || b.NCall != e.NCall || len(b.Sum2) != len(e.Sum2) {
				t.Fatalf("entry %d changed: %q/%d/%d vs %q/%d/%d", i, e.Name, e.NCall, len(e.Sum2), b.Name, b.NCall, len(b.Sum2))
			}
		}
	})
}

// FuzzReadGGUF reads arbitrary GGUF files as imatrices: no panic, and every
// entry accepted has non-negative calls and counts.
func FuzzReadGGUF(f *testing.F) {
	for _, c := range []float32{1, 7, float32(math.NaN()), float32(math.Inf(1)), -1, 1e30} {
		f.Add(imatrixGGUF(f, []float32{2, c}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		if err != nil {
			return
		}
		m, err := ReadGGUF(g)
		if err != nil {
			return
		}
		for _, e := range m.Entries {
			if e.NCall < 0 {
				t.Fatalf("entry %q: %d calls", e.Name, e.NCall)
			}
			for _, c := range e.Counts {
				if !(c >= 0) {
					t.Fatalf("entry %q: count %v", e.Name, c)
				}
			}
		}
	})
}
