package imatrix

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// datBytes builds a legacy .dat file by hand from the format description.
func datBytes(entries []struct {
	name  string
	ncall int32
	vals  []float32
}, trailer bool) []byte {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	w(int32(len(entries)))
	for _, e := range entries {
		w(int32(len(e.name)))
		b.WriteString(e.name)
		w(e.ncall)
		w(int32(len(e.vals)))
		w(e.vals)
	}
	if trailer {
		w(int32(0))
	}
	return b.Bytes()
}

func TestDatRoundTrip(t *testing.T) {
	in := datBytes([]struct {
		name  string
		ncall int32
		vals  []float32
	}{
		{"a.weight", 10, []float32{3.1, 1.6, 0.1, 7}},
		{"b.weight", 3, []float32{0.3, 0.2}},
	}, true)
	m, err := ReadDat(bytes.NewReader(in), "x.dat", int64(len(in)))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := m.Lookup("a.weight")
	if !ok || e.NCall != 10 {
		t.Fatalf("entry a: %+v", e)
	}
	if got := e.Stored(); got[0] != 3.1 || got[3] != 7 {
		t.Errorf("stored values changed: %v", got)
	}
	if got := e.Mean(); got[0] != float32(3.1)/10 {
		t.Errorf("mean %v, want stored/ncall", got[0])
	}
	var out bytes.Buffer
	if err := WriteDat(&out, m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("write(read(x)) differs from x:\n%x\n%x", out.Bytes(), in)
	}
}

func TestDatMalformed(t *testing.T) {
	good := datBytes([]struct {
		name  string
		ncall int32
		vals  []float32
	}{{"a.weight", 1, []float32{1, 2}}}, false)
	cases := map[string][]byte{
		"empty":        {},
		"zero entries": {0, 0, 0, 0},
		"huge name":    append([]byte{1, 0, 0, 0}, 0xff, 0xff, 0xff, 0x7f),
		"huge nval": func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint32(b[4+4+8+4:], 1<<30)
			return b
		}(),
		"truncated vals": good[:len(good)-2],
	}
	for name, data := range cases {
		_, err := ReadDat(bytes.NewReader(data), "bad.dat", int64(len(data)))
		if err == nil || !strings.Contains(err.Error(), "bad.dat") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	dup := datBytes([]struct {
		name  string
		ncall int32
		vals  []float32
	}{{"a", 1, []float32{1}}, {"a", 1, []float32{1}}}, false)
	if _, err := ReadDat(bytes.NewReader(dup), "dup.dat", int64(len(dup))); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
}

func TestSumStoredLikeSDCPP(t *testing.T) {
	a := &Matrix{Entries: []*Entry{{Name: "w", NCall: 2, Sum2: []float32{1, 2}, Counts: []float32{2}}}}
	b := &Matrix{Entries: []*Entry{{Name: "w", NCall: 4, Sum2: []float32{0.5, 0.25}, Counts: []float32{4}}}}
	sum, err := SumStored([]string{"a", "b"}, []*Matrix{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if got := sum["w"]; got[0] != 1.5 || got[1] != 2.25 {
		t.Errorf("sum %v", got)
	}
	c := &Matrix{Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{1}, Counts: []float32{1}}}}
	if _, err := SumStored([]string{"a", "c"}, []*Matrix{a, c}); err == nil {
		t.Error("length mismatch accepted")
	}
}

func TestGoldenDatFiles(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "sdcli-golden")
	for _, name := range []string{"imatrix-a.dat", "imatrix-b.dat", "sd15-sdcli.imatrix.dat"} {
		path := filepath.Join(dir, name)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Skipf("%s absent", path)
		}
		m, err := OpenDat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Validate(path); err != nil {
			t.Error(err)
		}
		var out bytes.Buffer
		if err := WriteDat(&out, m); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), raw) {
			t.Errorf("%s: rewrite differs", name)
		}
		for _, e := range m.Entries {
			for _, v := range e.Sum2 {
				if math.IsNaN(float64(v)) {
					t.Fatalf("%s: NaN in %s", name, e.Name)
				}
			}
		}
		if name == "sd15-sdcli.imatrix.dat" && len(m.Entries) != 256 {
			t.Errorf("%s: %d entries, want 256", name, len(m.Entries))
		}
	}
}

func TestGGUFRoundTrip(t *testing.T) {
	m := &Matrix{Datasets: []string{"prompts.txt"}, ChunkCount: 3, ChunkSize: 1,
		Entries: []*Entry{
			{Name: "b.weight", NCall: 3, Sum2: []float32{1, 2, 3, 4}, Counts: []float32{3}},
			{Name: "a.weight", NCall: 2, Sum2: []float32{0.5, 0.25, 1, 1, 2, 2}, Counts: []float32{2, 1}},
		}}
	path := filepath.Join(t.TempDir(), "im.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	long, err := WriteGGUF(f, m)
	f.Close()
	if err != nil || len(long) != 0 {
		t.Fatal(err, long)
	}
	back, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.ChunkCount != 3 || back.ChunkSize != 1 || len(back.Datasets) != 1 || back.Datasets[0] != "prompts.txt" {
		t.Errorf("metadata: %+v", back)
	}
	if got := back.Names(); len(got) != 2 || back.Entries[0].Name != "a.weight" {
		t.Errorf("names %v (entries must be sorted)", got)
	}
	a, _ := back.Lookup("a.weight")
	if mean := a.Mean(); mean[0] != 0.25 || mean[3] != 1 || mean[5] != 2 {
		t.Errorf("mean per expert: %v", mean)
	}
	b, _ := back.Lookup("b.weight")
	if b.NCall != 3 || b.Stored()[3] != 4 {
		t.Errorf("b: ncall %d stored %v", b.NCall, b.Stored())
	}
	// Open also reads the legacy format.
	dat := filepath.Join(t.TempDir(), "im.dat")
	g, _ := os.Create(dat)
	if err := WriteDat(g, back); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if d, err := Open(dat); err != nil || len(d.Entries) != 2 {
		t.Errorf("Open(.dat): %v", err)
	}
}

// Encode picks the format by extension: GGUF for .gguf in any case, .dat
// for every other name.
func TestEncodeByExtension(t *testing.T) {
	m := &Matrix{ChunkCount: 1, Entries: []*Entry{{Name: "w", NCall: 1, Sum2: []float32{1, 2}, Counts: []float32{1}}}}
	for name, gguf := range map[string]bool{"a.gguf": true, "b.GGUF": true, "c.dat": false, "d.imatrix": false, "e": false} {
		var b bytes.Buffer
		if _, err := Encode(&b, name, m); err != nil {
			t.Fatal(err)
		}
		if got := bytes.HasPrefix(b.Bytes(), []byte("GGUF")); got != gguf {
			t.Errorf("%s: GGUF %v, want %v", name, got, gguf)
		}
		path := filepath.Join(t.TempDir(), "x")
		os.WriteFile(path, b.Bytes(), 0o644)
		if back, err := Open(path); err != nil || len(back.Entries) != 1 {
			t.Errorf("%s: read back %v", name, err)
		}
	}
}
