package ckpt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// sample is a small state dict that covers every code path of a normal
// checkpoint: several dtypes, two tensors sharing a storage at different
// offsets, a parameter, a scalar, a size-1 dim with an odd stride, nesting
// under "state_dict", and scalar metadata.
var sample = []tspec{
	{name: "model.a.weight", class: "FloatStorage", key: "0", numel: 9, size: []int64{2, 3}},
	{name: "model.a.bias", class: "HalfStorage", key: "1", numel: 3, size: []int64{3}},
	{name: "model.b", class: "FloatStorage", key: "0", numel: 9, offset: 6, size: []int64{3}},
	{name: "model.p", class: "BFloat16Storage", key: "2", numel: 4, size: []int64{2, 2}, param: true},
	{name: "step", class: "LongStorage", key: "3", numel: 1, size: []int64{}},
	{name: "model.d", class: "DoubleStorage", key: "4", numel: 2, size: []int64{1, 2}, stride: []int64{99, 1}},
	{name: "model.i8", class: "CharStorage", key: "5", numel: 4, size: []int64{4}},
	{name: "model.i32", class: "IntStorage", key: "6", numel: 2, size: []int64{2}},
	{name: "model.u8", class: "ByteStorage", key: "7", numel: 2, size: []int64{2}},
	{name: "model.bool", class: "BoolStorage", key: "8", numel: 2, size: []int64{2}},
	{name: "model.i16", class: "ShortStorage", key: "9", numel: 2, size: []int64{2}},
}

var classType = map[string]formats.DType{
	"FloatStorage": formats.F32, "HalfStorage": formats.F16, "BFloat16Storage": formats.BF16,
	"LongStorage": formats.I64, "DoubleStorage": formats.F64, "CharStorage": formats.I8,
	"IntStorage": formats.I32, "ByteStorage": formats.U8, "BoolStorage": formats.Bool,
	"ShortStorage": formats.I16,
}

// storagesFor fills every storage with a distinct byte pattern.
func storagesFor(ts []tspec) (map[string][]byte, map[string]int) {
	data, elem := map[string][]byte{}, map[string]int{}
	for _, t := range ts {
		if _, ok := data[t.key]; ok {
			continue
		}
		es := classType[t.class].Info().BlockBytes
		if t.v3dtype != "" {
			es = 1
		}
		b := make([]byte, t.numel*int64(es))
		for i := range b {
			b[i] = byte(len(data)*37 + i + 1)
		}
		data[t.key], elem[t.key] = b, es
	}
	return data, elem
}

func keysOf(ts []tspec) []string {
	var keys []string
	for _, t := range ts {
		if !slices.Contains(keys, t.key) {
			keys = append(keys, t.key)
		}
	}
	return keys
}

// wrapped pickles {"state_dict": OrderedDict(...), "global_step": 42, "epoch": 1}.
func wrapped(ts []tspec, legacy bool) []byte {
	p := newPickle(2)
	p.op('}').put().op('(')
	p.str("state_dict")
	for i := range ts {
		ts[i].legacy = legacy
	}
	p.stateDict(ts)
	p.str("global_step").int(42).str("epoch").int(1).str("lr").op('G', 0x3f, 0x50, 0x62, 0x4d, 0xd2, 0xf1, 0xa9, 0xfc)
	p.op('u')
	return p.stop()
}

func parseBytes(t testing.TB, b []byte, name string) (*File, error) {
	t.Helper()
	return Parse(bytes.NewReader(b), int64(len(b)), name)
}

// checkSample verifies names, order, types, shapes and data of the sample.
func checkSample(t *testing.T, f *File, data map[string][]byte) {
	t.Helper()
	ts := f.Tensors()
	if len(ts) != len(sample) {
		t.Fatalf("%d tensors, want %d", len(ts), len(sample))
	}
	for i, want := range sample {
		got := ts[i]
		wantName := want.name
		if got.Name != wantName {
			t.Errorf("tensor %d is %q, want %q", i, got.Name, wantName)
		}
		dt := classType[want.class]
		if got.Type != dt {
			t.Errorf("%s: type %s, want %s", got.Name, got.Type, dt)
		}
		if !slices.Equal(got.Shape, want.size) {
			t.Errorf("%s: shape %v, want %v", got.Name, got.Shape, want.size)
		}
		es := int64(dt.Info().BlockBytes)
		n, _ := formats.Elements(want.size)
		wantData := data[want.key][want.offset*es : (want.offset+n)*es]
		b, err := formats.ReadTensor(f, &got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, wantData) {
			t.Errorf("%s: data %x, want %x", got.Name, b, wantData)
		}
	}
	for _, kv := range []formats.KV{
		{Key: "global_step", Type: formats.TypeInt64, Value: int64(42)},
		{Key: "epoch", Type: formats.TypeInt64, Value: int64(1)},
		{Key: "lr", Type: formats.TypeFloat64, Value: 1e-3},
	} {
		got, ok := f.Metadata().Get(kv.Key)
		if !ok || got != kv {
			t.Errorf("metadata %s = %#v, want %#v", kv.Key, got, kv)
		}
	}
}

func TestZip(t *testing.T) {
	data, _ := storagesFor(sample)
	file := buildZip(t, "archive", wrapped(sample, false), data)
	f, err := parseBytes(t, file, "model.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	checkSample(t, f, data)
	// Offsets are absolute: the bytes at Offset in the file are the tensor's.
	for _, tn := range f.Tensors() {
		if !bytes.Equal(file[tn.Offset:tn.Offset+tn.Size], mustRead(t, f, tn)) {
			t.Errorf("%s: Offset %d does not point at its data", tn.Name, tn.Offset)
		}
	}
	info := f.Info()
	if info.Format != "ckpt" || info.Version != 3 || len(info.Warnings) != 0 {
		t.Errorf("info %+v", info)
	}
}

func TestLegacy(t *testing.T) {
	data, elem := storagesFor(sample)
	file := buildLegacy(wrapped(sample, true), keysOf(sample), data, elem)
	f, err := parseBytes(t, file, "model.pt")
	if err != nil {
		t.Fatal(err)
	}
	checkSample(t, f, data)
	if v := f.Info().Version; v != LegacyProtocolVersion {
		t.Errorf("version %d", v)
	}
	if !IsLegacyHead(file[:64]) || IsLegacyHead([]byte("\x80\x02K\x01.")) {
		t.Error("IsLegacyHead")
	}
}

func mustRead(t *testing.T, f *File, tn formats.Tensor) []byte {
	t.Helper()
	b, err := formats.ReadTensor(f, &tn)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLegacyView covers the legacy view metadata (key, offset, numel): the
// tensor's storage starts inside its root storage.
func TestLegacyView(t *testing.T) {
	ts := []tspec{
		{name: "w", class: "FloatStorage", key: "root", numel: 8, size: []int64{2}, offset: 1, legacy: true, view: []any{"v", int64(4), int64(4)}},
	}
	data, elem := storagesFor(ts)
	main := newPickle(2).stateDict(ts).stop()
	f, err := parseBytes(t, buildLegacy(main, []string{"root"}, data, elem), "view.pt")
	if err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, f, f.Tensors()[0])
	if want := data["root"][(4+1)*4 : (4+1+2)*4]; !bytes.Equal(got, want) {
		t.Errorf("view data %x, want %x", got, want)
	}
	ts[0].offset = 3 // 4+3+2 > 8: past the view
	main = newPickle(2).stateDict(ts).stop()
	_, err = parseBytes(t, buildLegacy(main, []string{"root"}, data, elem), "view.pt")
	wantErr(t, err, `view.pt: tensor "w": elements [3, 5) run past its storage "root"`)
}

// TestV3 covers _rebuild_tensor_v3 over an UntypedStorage, which newer
// torch writes for dtypes without a typed storage class (float8, uint16).
func TestV3(t *testing.T) {
	ts := []tspec{
		{name: "f8", key: "0", numel: 6, size: []int64{2, 2}, offset: 1, v3dtype: "float8_e4m3fn"},
		{name: "u16", key: "1", numel: 8, size: []int64{3}, offset: 1, v3dtype: "uint16"},
	}
	data, _ := storagesFor(ts)
	f, err := parseBytes(t, buildZip(t, "m", newPickle(2).stateDict(ts).stop(), data), "f8.pt")
	if err != nil {
		t.Fatal(err)
	}
	got := f.Tensors()
	if got[0].Type != formats.F8_E4M3 || got[1].Type != formats.U16 {
		t.Fatalf("types %s %s", got[0].Type, got[1].Type)
	}
	if b := mustRead(t, f, got[0]); !bytes.Equal(b, data["0"][1:5]) {
		t.Errorf("f8 data %x", b)
	}
	if b := mustRead(t, f, got[1]); !bytes.Equal(b, data["1"][2:8]) {
		t.Errorf("u16 data %x", b)
	}
}

// TestDuplicatesAndNesting: tensors are keyed by their leaf key; a repeated
// key keeps its first position and the later tensor, with a warning;
// tensors in lists are skipped; a dict that contains itself terminates.
func TestDuplicatesAndNesting(t *testing.T) {
	p := newPickle(2)
	p.op('}').put() // memo 0: the root
	p.op('(')
	p.str("a").op('}').put().op('(')
	p.str("x").tensor(tspec{class: "FloatStorage", key: "0", numel: 2, size: []int64{1}})
	p.str("y").tensor(tspec{class: "FloatStorage", key: "0", numel: 2, size: []int64{1}})
	p.op('u')
	p.str("b").op('}').put().op('(')
	p.str("x").tensor(tspec{class: "FloatStorage", key: "0", numel: 2, offset: 1, size: []int64{1}})
	p.op('u')
	p.str("self").get(0)
	p.str("list").op(']').put().op('(').tensor(tspec{class: "FloatStorage", key: "0", numel: 2, size: []int64{1}}).op('e')
	p.op('u')
	data, _ := storagesFor([]tspec{{class: "FloatStorage", key: "0", numel: 2}})
	f, err := parseBytes(t, buildZip(t, "archive", p.stop(), data), "dup.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tn := range f.Tensors() {
		names = append(names, tn.Name)
	}
	if !slices.Equal(names, []string{"x", "y"}) {
		t.Fatalf("names %q", names)
	}
	if b := mustRead(t, f, f.Tensors()[0]); !bytes.Equal(b, data["0"][4:8]) {
		t.Errorf("x is not the later tensor: %x", b)
	}
	w := strings.Join(f.Info().Warnings, "\n")
	if !strings.Contains(w, `tensor "x" appears more than once`) || !strings.Contains(w, "1 tensors not stored under a string dict key") {
		t.Errorf("warnings %q", w)
	}
}

// TestRootTensor: torch.save(tensor) yields one tensor named "tensor".
func TestRootTensor(t *testing.T) {
	ts := tspec{class: "HalfStorage", key: "0", numel: 4, size: []int64{4}}
	data, _ := storagesFor([]tspec{ts})
	f, err := parseBytes(t, buildZip(t, "archive", newPickle(2).tensor(ts).stop(), data), "t.pt")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors()) != 1 || f.Tensors()[0].Name != RootTensorName {
		t.Fatalf("tensors %+v", f.Tensors())
	}
}

// TestOpen goes through formats.Open (detection) for both containers and
// checks that the file is not modified.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	data, elem := storagesFor(sample)
	files := map[string][]byte{
		"zip.ckpt":    buildZip(t, "zip", wrapped(sample, false), data),
		"legacy.ckpt": buildLegacy(wrapped(sample, true), keysOf(sample), data, elem),
		// data.pkl not first: found through the central directory.
		"late.pt": buildZipLate(t, wrapped(sample, false), data),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o444); err != nil {
			t.Fatal(err)
		}
		m, err := formats.Open(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, ok := m.(*File)
		if !ok {
			t.Fatalf("%s: opened as %T", name, m)
		}
		checkSample(t, f, data)
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(p)
		if !bytes.Equal(after, b) {
			t.Errorf("%s: modified", name)
		}
	}
	// A zip without data.pkl is not a checkpoint.
	other := filepath.Join(dir, "other.zip")
	os.WriteFile(other, buildZipNoPkl(t), 0o644)
	if Match(other, mustHead(t, other)) {
		t.Error("a zip without data.pkl matched")
	}
	if _, err := formats.Open(other); !errors.Is(err, formats.ErrFormat) {
		t.Errorf("other.zip: %v", err)
	}
}

func mustHead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b[:min(len(b), formats.HeadSize)]
}

func buildZipLate(t *testing.T, pkl []byte, data map[string][]byte) []byte {
	var buf bytes.Buffer
	zw := newZipWriter(&buf)
	zw.add(t, "late/version", []byte("3"))
	for k, d := range data {
		zw.add(t, "late/data/"+k, d)
	}
	zw.add(t, "late/data.pkl", pkl)
	zw.close(t)
	return buf.Bytes()
}

func buildZipNoPkl(t *testing.T) []byte {
	var buf bytes.Buffer
	zw := newZipWriter(&buf)
	zw.add(t, "readme.txt", []byte("hello"))
	zw.close(t)
	return buf.Bytes()
}

func wantErr(t *testing.T, err error, sub string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", sub)
	}
	if !strings.Contains(err.Error(), sub) {
		t.Fatalf("error %q does not contain %q", err, sub)
	}
}
