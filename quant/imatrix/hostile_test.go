package imatrix

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats/gguf"
)

// imatrixGGUF encodes one entry with the given counts as a GGUF imatrix.
func imatrixGGUF(t testing.TB, counts []float32) []byte {
	t.Helper()
	m := &Matrix{ChunkCount: 1, ChunkSize: 1, Entries: []*Entry{{Name: "w", NCall: 1, Sum2: make([]float32, 2*len(counts)), Counts: counts}}}
	var b bytes.Buffer
	if _, err := WriteGGUF(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCountsMustBeCalls: GGUF imatrix counts of NaN, Inf, negative or huge
// values are refused, naming the entry, instead of becoming calls
// -9223372036854775808 (issue 14, item 13).
func TestCountsMustBeCalls(t *testing.T) {
	for _, c := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), -1, 1e30} {
		b := imatrixGGUF(t, []float32{2, c})
		g, err := gguf.Parse(bytes.NewReader(b), int64(len(b)), "im.gguf")
		if err != nil {
			t.Fatal(err)
		}
		m, err := ReadGGUF(g)
		if err == nil || !strings.Contains(err.Error(), `im.gguf: entry "w": count 1 is`) {
			t.Errorf("count %v: %v (calls %v)", c, err, m)
		}
	}
	b := imatrixGGUF(t, []float32{2, 3})
	g, _ := gguf.Parse(bytes.NewReader(b), int64(len(b)), "im.gguf")
	if m, err := ReadGGUF(g); err != nil || m.Entries[0].NCall != 3 {
		t.Errorf("counts 2, 3: %v", err)
	}
}
