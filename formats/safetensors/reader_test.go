package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// raw builds a file from a header given as text and a data section.
func raw(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func parseBytes(b []byte, name string) (*File, error) {
	return Parse(bytes.NewReader(b), int64(len(b)), name)
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r     io.ReaderAt
	bytes atomic.Int64
	calls atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bytes.Add(int64(n))
	c.calls.Add(1)
	return n, err
}

func TestParseValid(t *testing.T) {
	// JSON order differs from offset order and from name order, and the
	// metadata is not sorted: both orders must survive.
	header := `{"b.weight":{"dtype":"F16","shape":[2,3],"data_offsets":[8,20]},` +
		`"__metadata__":{"z":"last","a":"first"},` +
		`"a.bias":{"data_offsets":[0,8],"shape":[2],"dtype":"F32"},` +
		`"c.scalar":{"dtype":"BF16","shape":[],"data_offsets":[20,22]},` +
		`"d.empty":{"dtype":"F8_E4M3","shape":[0,5],"data_offsets":[22,22]}}   `
	data := make([]byte, 22)
	for i := range data {
		data[i] = byte(i)
	}
	b := raw(header, data)
	f, err := parseBytes(b, "ok.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	base := int64(8 + len(header))
	want := []formats.Tensor{
		{Name: "b.weight", Type: formats.F16, Shape: []int64{2, 3}, File: "ok.safetensors", Offset: base + 8, Size: 12},
		{Name: "a.bias", Type: formats.F32, Shape: []int64{2}, File: "ok.safetensors", Offset: base, Size: 8},
		{Name: "c.scalar", Type: formats.BF16, Shape: []int64{}, File: "ok.safetensors", Offset: base + 20, Size: 2},
		{Name: "d.empty", Type: formats.F8_E4M3, Shape: []int64{0, 5}, File: "ok.safetensors", Offset: base + 22, Size: 0},
	}
	if got := f.Tensors(); !equalTensors(got, want) {
		t.Errorf("tensors:\n got %+v\nwant %+v", got, want)
	}
	wantMeta := formats.Metadata{
		{Key: "z", Type: formats.TypeString, Value: "last"},
		{Key: "a", Type: formats.TypeString, Value: "first"},
	}
	if got := f.Metadata(); !slices.Equal(got, wantMeta) {
		t.Errorf("metadata = %+v, want %+v", got, wantMeta)
	}
	info := f.Info()
	if info.Format != "safetensors" || info.DataOffset != base || !slices.Equal(info.Files, []string{"ok.safetensors"}) ||
		len(info.Warnings) != 0 {
		t.Errorf("info = %+v", info)
	}
	got, err := formats.ReadTensor(f, &f.Tensors()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[8:20]) {
		t.Errorf("b.weight data = %v, want %v", got, data[8:20])
	}
	if scalar := f.Tensors()[2]; scalar.Shape == nil {
		t.Error("scalar shape is nil, want []")
	}
}

func equalTensors(a, b []formats.Tensor) bool {
	return slices.EqualFunc(a, b, func(x, y formats.Tensor) bool {
		return x.Name == y.Name && x.Type == y.Type && slices.Equal(x.Shape, y.Shape) &&
			x.File == y.File && x.Offset == y.Offset && x.Size == y.Size
	})
}

func TestParseMalformed(t *testing.T) {
	const name = "bad.safetensors"
	ok := `"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	data8 := make([]byte, 8)
	hdr := func(body string) []byte { return raw("{"+body+"}", data8) }
	tooLong := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	tooLong = append(tooLong, "{}"...)
	pastEnd := binary.LittleEndian.AppendUint64(nil, 1000)
	pastEnd = append(pastEnd, "{}"...)
	cases := []struct {
		name string
		file []byte
		want []string // substrings of the error
	}{
		{"empty file", nil, []string{"0 bytes", "too short"}},
		{"short length", []byte{1, 2, 3, 4, 5}, []string{"5 bytes", "too short"}},
		{"header over limit", tooLong, []string{"header length 100000001", "limit"}},
		{"header past end", pastEnd, []string{"header length 1000", "past the end"}},
		{"invalid utf8", raw("{\"\xff\":1}", nil), []string{"not valid UTF-8", "byte 2"}},
		{"invalid json", raw(`{"t":`, nil), []string{"invalid JSON"}},
		{"invalid json syntax", raw(`{"t" 1}`, nil), []string{"invalid JSON"}},
		{"trailing comma", raw(`{"t":{"dtype":"F32","shape":[],"data_offsets":[0,4]},}`, make([]byte, 4)), []string{"invalid JSON"}},
		{"empty header", raw("", nil), []string{"header is empty"}},
		{"top level array", raw(`[1,2]`, nil), []string{"not a JSON object"}},
		{"top level string", raw(`"x"`, nil), []string{"not a JSON object"}},
		{"garbage after object", raw(`{} x`, nil), []string{"after the header object"}},
		{"second object", raw(`{}{}`, nil), []string{"after the header object"}},
		{"nul padding", raw("{}\x00\x00", nil), []string{"after the header object"}},
		{"metadata not object", hdr(`"__metadata__":[1],` + ok), []string{"__metadata__ is an array", "not an object of strings"}},
		{"metadata null", hdr(`"__metadata__":null,` + ok), []string{"__metadata__ is null"}},
		{"metadata number value", hdr(`"__metadata__":{"k":1},` + ok), []string{`value of "k"`, "not a string"}},
		{"metadata nested", hdr(`"__metadata__":{"k":{"a":"b"}},` + ok), []string{`value of "k"`, "an object"}},
		{"metadata duplicate key", hdr(`"__metadata__":{"k":"a","k":"b"},` + ok), []string{`duplicate key "k" in __metadata__`}},
		{"duplicate metadata", hdr(`"__metadata__":{},"__metadata__":{},` + ok), []string{`duplicate key "__metadata__"`}},
		{"duplicate tensor", hdr(ok + "," + ok), []string{`tensor "t": duplicate key`}},
		{"entry not object", hdr(`"t":[1]`), []string{`tensor "t": entry is an array, not an object`}},
		{"entry string", hdr(`"t":"F32"`), []string{`tensor "t": entry is the string "F32"`}},
		{"missing dtype", hdr(`"t":{"shape":[2],"data_offsets":[0,8]}`), []string{`tensor "t": missing field dtype`}},
		{"missing shape and offsets", hdr(`"t":{"dtype":"F32"}`), []string{`tensor "t": missing field shape, data_offsets`}},
		{"unknown field", hdr(`"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"stride":[1]}`), []string{`tensor "t": unknown field "stride"`}},
		{"duplicate field", hdr(`"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}`), []string{`tensor "t": duplicate field "dtype"`}},
		{"unknown dtype", hdr(`"t":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}`), []string{`tensor "t": unknown dtype "Q4_K"`}},
		{"lowercase dtype", hdr(`"t":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}`), []string{`unknown dtype "f32"`}},
		{"dtype not string", hdr(`"t":{"dtype":4,"shape":[2],"data_offsets":[0,8]}`), []string{`tensor "t": dtype is the number 4`}},
		{"shape not array", hdr(`"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}`), []string{`tensor "t": shape must be an array of non-negative integers`}},
		{"shape negative", hdr(`"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}`), []string{`tensor "t": shape must be`, "-2"}},
		{"shape float", hdr(`"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}`), []string{`tensor "t": shape must be`, "2.0"}},
		{"shape exponent", hdr(`"t":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}`), []string{`tensor "t": shape must be`}},
		{"shape string", hdr(`"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}`), []string{`tensor "t": shape must be`, `string "2"`}},
		{"shape nested", hdr(`"t":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}`), []string{`tensor "t": shape must be`, "an array"}},
		{"shape huge int", hdr(`"t":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}`), []string{`tensor "t": shape must be`}},
		{"offsets one", hdr(`"t":{"dtype":"F32","shape":[2],"data_offsets":[8]}`), []string{`tensor "t": data_offsets must be 2 non-negative integers, got 1`}},
		{"offsets three", hdr(`"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}`), []string{`tensor "t": data_offsets must be 2 non-negative integers`}},
		{"offsets negative", hdr(`"t":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}`), []string{`tensor "t": data_offsets must be 2`}},
		{"offsets object", hdr(`"t":{"dtype":"F32","shape":[2],"data_offsets":{"a":0}}`), []string{`tensor "t": data_offsets must be 2`, "an object"}},
		{"offsets reversed", raw(`{"x.weight":{"dtype":"U8","shape":[2],"data_offsets":[10,8]}}`, make([]byte, 10)),
			[]string{`bad.safetensors: tensor "x.weight": data_offsets [10, 8) are reversed`}},
		{"size mismatch", hdr(`"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}`), []string{`tensor "t": data_offsets [0, 8) hold 8 bytes, but F32 [3] needs 12`}},
		{"f4 odd elements", hdr(`"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}`), []string{`tensor "t": F4 [3]`, "not a whole number of bytes"}},
		{"f6 partial group", hdr(`"t":{"dtype":"F6_E2M3","shape":[2,3],"data_offsets":[0,5]}`), []string{`tensor "t": F6_E2M3 [2 3]`, "not a whole number of bytes"}},
		{"shape overflow", hdr(`"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}`), []string{`tensor "t":`, "overflow"}},
		{"data past end", raw(`{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, data8), []string{`tensor "t": data_offsets [0, 16) run past the end of the file`, "8 bytes"}},
		{"first not at zero", raw(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8), []string{`tensor "t": data starts at byte 4`, "must start at 0"}},
		{"gap", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[1],"data_offsets":[6,8]}}`, data8),
			[]string{`tensor "b": gap of 2 bytes between tensor "a" [0, 4) and this tensor [6, 8)`}},
		{"overlap", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8),
			[]string{`tensor "b": data_offsets [4, 8) overlap tensor "a" [0, 8)`}},
		{"empty tensor inside another", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}`, data8),
			[]string{`tensor "z": data_offsets [4, 4) overlap tensor "a"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkStreamed(t, c.file)
			f, err := parseBytes(c.file, name)
			if err == nil {
				t.Fatalf("no error; tensors %+v", f.Tensors())
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.HasPrefix(msg, name+": ") {
				t.Errorf("error %q does not start with the file name", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if !errors.Is(err, ErrFormat) || !errors.Is(err, formats.ErrFormat) {
				t.Errorf("error %q does not wrap ErrFormat", msg)
			}
		})
	}
}

func TestParseWarnings(t *testing.T) {
	cases := []struct {
		name   string
		file   []byte
		warn   string // substring of the only warning, "" for none
		tensor int
	}{
		{"exact", raw(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), "", 1},
		{"trailing bytes", raw(`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 13)), "5 bytes after the end of the tensor data", 1},
		{"no tensors, trailing", raw(`{}`, make([]byte, 3)), "3 bytes after", 0},
		{"no tensors", raw(`{}`, nil), "", 0},
		{"only metadata", raw(`{"__metadata__":{"format":"pt"}}`, nil), "", 0},
		{"leading whitespace", raw(` {}`, nil), "whitespace before '{'", 0},
		{"trailing json whitespace", raw("{}\n\t \r", nil), "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := parseBytes(c.file, "w.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Tensors()) != c.tensor {
				t.Errorf("%d tensors, want %d", len(f.Tensors()), c.tensor)
			}
			warns := f.Info().Warnings
			switch {
			case c.warn == "" && len(warns) != 0:
				t.Errorf("warnings %q, want none", warns)
			case c.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0], c.warn) || !strings.HasPrefix(warns[0], "w.safetensors: ")):
				t.Errorf("warnings %q, want one mentioning the file and %q", warns, c.warn)
			}
		})
	}
}

// TestHugeClaims checks that claimed sizes are checked before anything of
// that size is allocated.
func TestHugeClaims(t *testing.T) {
	cases := [][]byte{
		binary.LittleEndian.AppendUint64(nil, MaxHeaderSize), // claims a 100 MB header in an 8-byte file
		binary.LittleEndian.AppendUint64(nil, 1<<63),
		raw(`{"t":{"dtype":"F64","shape":[1000000000000,1000000000],"data_offsets":[0,8000000000000000000]}}`, nil),
		raw(`{"t":{"dtype":"F64","shape":[1000000000000,1000000],"data_offsets":[0,8000000000000000000]}}`, nil),
		raw(`{"t":{"dtype":"U8","shape":[9000000000000000000],"data_offsets":[0,9000000000000000000]}}`, nil),
	}
	for i, b := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := parseBytes(b, "huge.safetensors")
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("case %d: no error", i)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Errorf("case %d: allocated %d bytes", i, d)
		}
	}
}

func TestOpenReadsHeaderOnly(t *testing.T) {
	header := `{"a":{"dtype":"F32","shape":[1024],"data_offsets":[0,4096]},"b":{"dtype":"I8","shape":[3],"data_offsets":[4096,4099]}}`
	data := make([]byte, 4099)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b := raw(header, data)
	cr := &countingReaderAt{r: bytes.NewReader(b)}
	f, err := Parse(cr, int64(len(b)), "count.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cr.bytes.Load(), int64(8+len(header)); got != want {
		t.Errorf("Parse read %d bytes, want %d (length + header)", got, want)
	}
	tb := f.Tensors()[1]
	p := make([]byte, 2)
	if _, err := f.ReadTensorAt(&tb, p, 1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[4097:4099]) {
		t.Errorf("ReadTensorAt = %v, want %v", p, data[4097:4099])
	}
	if _, err := f.ReadTensorAt(&tb, make([]byte, 3), 1); err == nil || !strings.Contains(err.Error(), `tensor "b"`) {
		t.Errorf("read past the tensor: err = %v", err)
	}
	other := tb
	other.File = "elsewhere.safetensors"
	if _, err := f.ReadTensorAt(&other, p, 0); err == nil {
		t.Error("read of another file's tensor succeeded")
	}
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	b := raw(`{"x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, []byte{1, 0, 0, 0, 2, 0, 0, 0})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := formats.ReadTensor(f, &f.Tensors()[0])
	if err != nil || !bytes.Equal(got, b[len(b)-8:]) {
		t.Errorf("ReadTensor = %v, %v", got, err)
	}
	if f.Path() != path || f.Size() != int64(len(b)) {
		t.Errorf("Path %q Size %d", f.Path(), f.Size())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// formats.Open finds the format by content, whatever the extension.
	odd := filepath.Join(dir, "weights.bin")
	if err := os.WriteFile(odd, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := formats.Open(odd)
	if err != nil {
		t.Fatal(err)
	}
	if m.Info().Format != "safetensors" || len(m.Tensors()) != 1 {
		t.Errorf("formats.Open: %+v", m.Info())
	}
	m.Close()

	// Truncated file: the error names the file and the tensor.
	trunc := filepath.Join(dir, "trunc.safetensors")
	if err := os.WriteFile(trunc, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(trunc); err == nil || !strings.Contains(err.Error(), trunc+`: tensor "x"`) {
		t.Errorf("truncated: err = %v", err)
	}
	if _, err := Open(dir); err == nil {
		t.Error("Open(directory) succeeded")
	}
}

func TestLooksLikeHeader(t *testing.T) {
	cases := []struct {
		head []byte
		want bool
	}{
		{raw(`{}`, nil), true},
		{raw("  \n{\"a\"", nil), true},
		{raw(`[]`, nil), false},
		{[]byte("GGUF\x03\x00\x00\x00\x00\x00\x00\x00"), false},
		{binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), false},
		{append(binary.LittleEndian.AppendUint64(nil, 1), '{'), false},
		{[]byte{2, 0, 0, 0, 0, 0, 0, 0}, false},
		{nil, false},
	}
	for i, c := range cases {
		if got := LooksLikeHeader(c.head); got != c.want {
			t.Errorf("case %d (%q): %v, want %v", i, c.head, got, c.want)
		}
	}
}

// TestReadAfterShrink reads from a file that was truncated after Open: the
// read fails with an error naming the file and tensor instead of short data.
func TestReadAfterShrink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shrink.safetensors")
	b := raw(`{"x":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, make([]byte, 16))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, int64(len(b)-4)); err != nil {
		t.Fatal(err)
	}
	_, err = formats.ReadTensor(f, &f.Tensors()[0])
	if err == nil || !strings.Contains(err.Error(), path+`: tensor "x"`) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("err = %v", err)
	}
}

// TestShapesDoNotAlias: the parser keeps every shape in shared arrays, so
// an append to one tensor's shape must copy, not write into the next one's.
func TestShapesDoNotAlias(t *testing.T) {
	ts := []formats.Tensor{{Name: "a", Type: formats.F32, Shape: []int64{2}}, {Name: "b", Type: formats.F32, Shape: []int64{3, 1}}, {Name: "c", Type: formats.F32, Shape: []int64{}}}
	b, _ := writeAll(t, ts, nil, nil)
	f, err := Parse(bytes.NewReader(b), int64(len(b)), "x.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	got := f.Tensors()
	_ = append(got[0].Shape, 7)
	_ = append(got[2].Shape, 9)
	if !slices.Equal(got[1].Shape, []int64{3, 1}) || got[2].Shape == nil || len(got[2].Shape) != 0 {
		t.Errorf("shapes after appends: %v %v %v", got[0].Shape, got[1].Shape, got[2].Shape)
	}
}
