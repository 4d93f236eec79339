package inspect

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/synth"
)

// sparseSpec is a full-width Flux with six double and six single blocks in
// F32: 2.95 billion parameters, 11.8 GB of tensor data.
var sparseSpec = synth.Spec{Arch: "flux", Depth: 6, DType: formats.F32}

// writeSparse writes the header of sparseSpec and extends the file to its
// full size without writing data (a sparse file on Linux file systems).
func writeSparse(tb testing.TB, dir, format string) (string, int64) {
	tb.Helper()
	desc, err := synth.Descriptors(sparseSpec)
	if err != nil {
		tb.Fatal(err)
	}
	var header []byte
	var size int64
	path := filepath.Join(dir, "sparse."+format)
	if format == "gguf" {
		w, err := gguf.NewWriter(io.Discard, desc, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		header, size = w.Header(), w.Size()
	} else {
		w, err := safetensors.NewWriter(io.Discard, desc, map[string]string{"format": "pt"}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		header, size = w.HeaderBytes(), w.Size()
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(header); err != nil {
		tb.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		tb.Fatal(err)
	}
	return path, size
}

// readBytes returns the bytes this process has read through read(2) and
// pread(2) so far (rchar in /proc/self/io).
func readBytes(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		tb.Skip("no /proc/self/io")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Skip("no rchar in /proc/self/io")
	return 0
}

func inspectFile(tb testing.TB, path string, out io.Writer) *Summary {
	m, err := formats.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close()
	s, err := Summarize(m, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := WriteText(out, s); err != nil {
		tb.Fatal(err)
	}
	return s
}

// Inspecting a file of more than 10 GB reads its header only.
func TestSparseReadsHeaderOnly(t *testing.T) {
	dir := t.TempDir()
	for _, format := range []string{"safetensors", "gguf"} {
		path, size := writeSparse(t, dir, format)
		if size < 10e9 {
			t.Fatalf("sparse file is only %d bytes", size)
		}
		before := readBytes(t)
		var b bytes.Buffer
		s := inspectFile(t, path, &b)
		read := readBytes(t) - before
		if read > 1<<20 {
			t.Errorf("%s: inspecting %d bytes read %d bytes", format, size, read)
		}
		if s.Architecture.Name != "flux" || s.TotalBytes+s.DataOffset > size {
			t.Errorf("%s: arch %s, %d data bytes from %d in a %d-byte file", format, s.Architecture.Name, s.TotalBytes, s.DataOffset, size)
		}
		os.Remove(path)
	}
}

// BenchmarkInspectSparse10GB measures a whole inspection (open, summary,
// detection, text with the tensor table) of an 11.8 GB sparse file, and
// reports the bytes read per inspection.
func BenchmarkInspectSparse10GB(b *testing.B) {
	for _, format := range []string{"safetensors", "gguf"} {
		b.Run(format, func(b *testing.B) {
			path, size := writeSparse(b, b.TempDir(), format)
			b.ReportMetric(float64(size)/1e9, "file-GB")
			before := readBytes(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				inspectFile(b, path, io.Discard)
			}
			b.StopTimer()
			b.ReportMetric(float64(readBytes(b)-before)/float64(b.N), "read-B/op")
		})
	}
}
