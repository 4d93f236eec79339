package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// allValues has one entry of every value type, an array of every element
// type, an empty array and a nested array.
func allValues() formats.Metadata {
	A := func(e formats.ValueType, v any) formats.KV {
		return formats.KV{Key: "arr." + e.String(), Type: formats.TypeArray, Value: formats.Array{Elem: e, Values: v}}
	}
	return formats.Metadata{
		{Key: "general.architecture", Type: formats.TypeString, Value: "sd1"},
		{Key: "v.u8", Type: formats.TypeUint8, Value: uint8(200)},
		{Key: "v.i8", Type: formats.TypeInt8, Value: int8(-100)},
		{Key: "v.u16", Type: formats.TypeUint16, Value: uint16(60000)},
		{Key: "v.i16", Type: formats.TypeInt16, Value: int16(-30000)},
		{Key: "v.u32", Type: formats.TypeUint32, Value: uint32(4000000000)},
		{Key: "v.i32", Type: formats.TypeInt32, Value: int32(-2000000000)},
		{Key: "v.f32", Type: formats.TypeFloat32, Value: float32(1.5)},
		{Key: "v.bool", Type: formats.TypeBool, Value: true},
		{Key: "v.string", Type: formats.TypeString, Value: "héllo"},
		{Key: "v.u64", Type: formats.TypeUint64, Value: uint64(1 << 63)},
		{Key: "v.i64", Type: formats.TypeInt64, Value: int64(-1 << 62)},
		{Key: "v.f64", Type: formats.TypeFloat64, Value: float64(-2.25)},
		{Key: "v.empty", Type: formats.TypeString, Value: ""},
		A(formats.TypeUint8, []uint8{1, 2, 255}),
		A(formats.TypeInt8, []int8{-1, 0, 127}),
		A(formats.TypeUint16, []uint16{1, 65535}),
		A(formats.TypeInt16, []int16{-32768, 7}),
		A(formats.TypeUint32, []uint32{0, 1 << 31}),
		A(formats.TypeInt32, []int32{-5, 1024, 64}),
		A(formats.TypeFloat32, []float32{0.5, -1e30}),
		A(formats.TypeBool, []bool{true, false, true}),
		A(formats.TypeString, []string{"a", "", "ccc"}),
		A(formats.TypeUint64, []uint64{1<<64 - 1}),
		A(formats.TypeInt64, []int64{-1, 1 << 40}),
		A(formats.TypeFloat64, []float64{3.25}),
		{Key: "arr.empty", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: []int32{}}},
		{Key: "arr.nested", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeArray, Values: []formats.Array{
			{Elem: formats.TypeInt32, Values: []int32{1, 2}},
			{Elem: formats.TypeString, Values: []string{"x"}},
			{Elem: formats.TypeArray, Values: []formats.Array{{Elem: formats.TypeUint8, Values: []uint8{9}}}},
		}}},
	}
}

// testTensors covers quantized and float types, a scalar, a torch [1, 64]
// shape (trimmed to ne [64] by TrimDims), trailing ones, a 5-dim and a
// zero-size tensor.
func testTensors() []formats.Tensor {
	return []formats.Tensor{
		{Name: "a.weight", Type: formats.F32, Shape: []int64{3, 5}},
		{Name: "q.weight", Type: formats.Q4_0, Shape: []int64{2, 64}},
		{Name: "k.weight", Type: formats.Q4_K, Shape: []int64{1, 256}},
		{Name: "scalar", Type: formats.F32, Shape: nil},
		{Name: "five", Type: formats.F16, Shape: []int64{2, 1, 3, 1, 2}},
		{Name: "empty", Type: formats.BF16, Shape: []int64{8, 0}},
		{Name: "col", Type: formats.I32, Shape: []int64{7, 1}},
		{Name: "last", Type: formats.Q8_0, Shape: []int64{32}},
	}
}

// tensorData returns deterministic random bytes for each tensor.
func tensorData(ts []formats.Tensor) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, len(ts))
	for i, t := range ts {
		n, err := t.Type.Bytes(t.Shape)
		if err != nil {
			panic(err)
		}
		out[i] = make([]byte, n)
		for j := range out[i] {
			out[i][j] = byte(r.Uint32())
		}
	}
	return out
}

// build writes a GGUF into memory, feeding data in small uneven pieces to
// exercise crossing tensor boundaries.
func build(t testing.TB, ts []formats.Tensor, meta formats.Metadata, opts *WriterOptions, data [][]byte) ([]byte, *Writer) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, ts, meta, opts)
	if err != nil {
		t.Fatal(err)
	}
	all := bytes.Join(data, nil)
	for len(all) > 0 {
		k := min(len(all), 7)
		if _, err := w.Write(all[:k]); err != nil {
			t.Fatal(err)
		}
		all = all[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != w.Size() {
		t.Fatalf("wrote %d bytes, Size says %d", buf.Len(), w.Size())
	}
	return buf.Bytes(), w
}

func parseBytes(b []byte) (*File, error) { return Parse(bytes.NewReader(b), int64(len(b)), "mem.gguf") }

func TestRoundTrip(t *testing.T) {
	for _, align := range []int{0, 32, 64} {
		for _, trim := range []bool{false, true} {
			for _, padEnd := range []bool{false, true} {
				t.Run(fmt.Sprintf("align%d/trim=%v/pad=%v", align, trim, padEnd), func(t *testing.T) {
					roundTrip(t, align, trim, padEnd)
				})
			}
		}
	}
}

func roundTrip(t *testing.T, align int, trim, padEnd bool) {
	ts := testTensors()
	data := tensorData(ts)
	meta := allValues()
	b, w := build(t, ts, meta, &WriterOptions{Alignment: align, TrimDims: trim, PadEnd: padEnd}, data)
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	wantAlign := max(align, 32)
	wantMeta := meta
	if wantAlign != 32 {
		wantMeta = append(append(formats.Metadata(nil), meta...), formats.KV{Key: AlignmentKey, Type: formats.TypeUint32, Value: uint32(wantAlign)})
	}
	if !reflect.DeepEqual(f.Metadata(), wantMeta) {
		t.Errorf("metadata differs:\n got %+v\nwant %+v", f.Metadata(), wantMeta)
	}
	info := f.Info()
	if info.Format != "gguf" || info.Version != 3 || info.Alignment != wantAlign || info.DataOffset%int64(wantAlign) != 0 {
		t.Errorf("info = %+v", info)
	}
	if len(info.Warnings) != 0 {
		t.Errorf("warnings on our own file: %q", info.Warnings)
	}
	if !f.Packed() {
		t.Error("not packed")
	}
	if end := int64(len(b)); padEnd != (end%int64(wantAlign) == 0) {
		t.Errorf("file size %d with PadEnd=%v and alignment %d", end, padEnd, wantAlign)
	}
	layout := w.Layout()
	got := f.Tensors()
	if len(got) != len(ts) {
		t.Fatalf("%d tensors, want %d", len(got), len(ts))
	}
	for i, want := range ts {
		g := got[i]
		ne := storedDims(nil, want.Shape, trim)
		wantShape := make([]int64, len(ne))
		for j, d := range ne {
			wantShape[len(ne)-1-j] = d
		}
		if g.Name != want.Name || g.Type != want.Type || !reflect.DeepEqual(g.Shape, wantShape) {
			t.Errorf("tensor %d = %s %s %v, want %s %s %v", i, g.Name, g.Type, g.Shape, want.Name, want.Type, wantShape)
		}
		if f.NDims(i) != len(ne) || !reflect.DeepEqual(f.NE(i), ne) {
			t.Errorf("%s: n_dims %d ne %v, want %d %v", g.Name, f.NDims(i), f.NE(i), len(ne), ne)
		}
		if g.Offset != layout[i].Offset || g.Size != layout[i].Size || g.Offset%int64(wantAlign) != 0 {
			t.Errorf("%s: at %d+%d, writer layout %d+%d", g.Name, g.Offset, g.Size, layout[i].Offset, layout[i].Size)
		}
		rd, err := formats.ReadTensor(f, &g)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rd, data[i]) {
			t.Errorf("%s: data differs", g.Name)
		}
	}
	// Everything between the tensors is zero.
	covered := make([]bool, len(b))
	for _, g := range got {
		for j := g.Offset; j < g.Offset+g.Size; j++ {
			covered[j] = true
		}
	}
	for j := info.DataOffset; j < int64(len(b)); j++ {
		if !covered[j] && b[j] != 0 {
			t.Fatalf("padding byte %d is %d", j, b[j])
		}
	}
}

// TestTrimDims pins the stored n_dims of the cases the brief names.
func TestTrimDims(t *testing.T) {
	cases := []struct {
		shape      []int64
		keep, trim []int64
	}{
		{[]int64{1, 64}, []int64{64, 1}, []int64{64}},
		{nil, []int64{1}, []int64{1}},
		{[]int64{1}, []int64{1}, []int64{1}},
		{[]int64{1, 1, 32}, []int64{32, 1, 1}, []int64{32}},
		{[]int64{4, 1, 3, 3}, []int64{3, 3, 1, 4}, []int64{3, 3, 1, 4}},
	}
	for _, c := range cases {
		if got := storedDims(nil, c.shape, false); !reflect.DeepEqual(got, c.keep) {
			t.Errorf("%v: kept %v, want %v", c.shape, got, c.keep)
		}
		if got := storedDims(nil, c.shape, true); !reflect.DeepEqual(got, c.trim) {
			t.Errorf("%v: trimmed %v, want %v", c.shape, got, c.trim)
		}
	}
}

func TestWriterErrors(t *testing.T) {
	ok := []formats.Tensor{{Name: "a", Type: formats.F32, Shape: []int64{4}}}
	cases := []struct {
		name    string
		tensors []formats.Tensor
		meta    formats.Metadata
		opts    *WriterOptions
		want    string
	}{
		{"dup tensor", append(ok, ok[0]), nil, nil, `tensor "a": duplicate name`},
		{"not ggml", []formats.Tensor{{Name: "f8", Type: formats.F8_E4M3, Shape: []int64{4}}}, nil, nil, `tensor "f8": type f8_e4m3 is not a ggml type`},
		{"unknown type", []formats.Tensor{{Name: "x", Type: formats.DType(4), Shape: []int64{4}}}, nil, nil, `tensor "x": type type(4) is not a ggml type`},
		{"row", []formats.Tensor{{Name: "q", Type: formats.Q4_K, Shape: []int64{2, 128}}}, nil, nil, `tensor "q": row of 128 elements`},
		{"size", []formats.Tensor{{Name: "s", Type: formats.F16, Shape: []int64{4}, Size: 4}}, nil, nil, `tensor "s": size 4`},
		{"zero dim", []formats.Tensor{{Name: "z", Type: formats.F32, Shape: []int64{0, 4}}}, nil, nil, `tensor "z": shape [0 4] has a zero outside the row dim`},
		{"dims", []formats.Tensor{{Name: "d", Type: formats.F32, Shape: []int64{1, 1, 1, 1, 1, 1, 1, 1, 1}}}, nil, nil, "9 dims"},
		{"dup key", ok, formats.Metadata{{Key: "k", Type: formats.TypeUint8, Value: uint8(1)}, {Key: "k", Type: formats.TypeUint8, Value: uint8(1)}}, nil, `duplicate metadata key "k"`},
		{"empty key", ok, formats.Metadata{{Key: "", Type: formats.TypeUint8, Value: uint8(1)}}, nil, "empty metadata key"},
		{"value type", ok, formats.Metadata{{Key: "k", Type: formats.TypeUint32, Value: 5}}, nil, `key "k": value of Go type int for GGUF type u32`},
		{"bad type", ok, formats.Metadata{{Key: "k", Type: 13, Value: 5}}, nil, "unknown value type 13"},
		{"array type", ok, formats.Metadata{{Key: "k", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeInt32, Values: []int64{1}}}}, nil, "array values of Go type []int64"},
		{"alignment", ok, nil, &WriterOptions{Alignment: 48}, "alignment 48 is not a power of two"},
		{"alignment key type", ok, formats.Metadata{{Key: AlignmentKey, Type: formats.TypeUint64, Value: uint64(64)}}, nil, "must be a u32"},
		{"alignment mismatch", ok, formats.Metadata{{Key: AlignmentKey, Type: formats.TypeUint32, Value: uint32(64)}}, &WriterOptions{Alignment: 128}, "= 64 but the writer's alignment is 128"},
	}
	for _, c := range cases {
		_, err := NewWriter(&bytes.Buffer{}, c.tensors, c.meta, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestWriterStreamErrors(t *testing.T) {
	ts := []formats.Tensor{{Name: "a", Type: formats.F32, Shape: []int64{4}}, {Name: "b", Type: formats.F32, Shape: []int64{2}}}
	w, err := NewWriter(&bytes.Buffer{}, ts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !errors.Is(err, formats.ErrIncomplete) || !strings.Contains(err.Error(), `tensor "b": 4 of its 8 bytes written`) {
		t.Errorf("short close: %v", err)
	}
	w, _ = NewWriter(&bytes.Buffer{}, ts, nil, nil)
	if _, err := w.Write(make([]byte, 25)); err == nil {
		t.Error("writing past the last tensor: no error")
	}
	// A metadata-only file.
	b, _ := build(t, nil, formats.Metadata{{Key: "k", Type: formats.TypeString, Value: "v"}}, nil, nil)
	f, err := parseBytes(b)
	if err != nil || len(f.Tensors()) != 0 || len(f.Metadata()) != 1 {
		t.Errorf("metadata-only file: %v", err)
	}
}

// TestGGMLTypes writes one tensor of every ggml type and reads it back.
func TestGGMLTypes(t *testing.T) {
	var ts []formats.Tensor
	for _, dt := range formats.Types() {
		if !dt.IsGGML() {
			continue
		}
		ts = append(ts, formats.Tensor{Name: dt.String(), Type: dt, Shape: []int64{3, int64(dt.Info().BlockSize) * 2}})
	}
	b, _ := build(t, ts, nil, nil, tensorData(ts))
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range f.Tensors() {
		want, _ := ts[i].Type.Bytes(ts[i].Shape)
		if g.Type != ts[i].Type || g.Size != want {
			t.Errorf("%s: %s, %d bytes, want %d", g.Name, g.Type, g.Size, want)
		}
	}
}

func TestFormatErrorUnwraps(t *testing.T) {
	_, err := parseBytes([]byte("nope"))
	if !errors.Is(err, ErrFormat) || !errors.Is(err, formats.ErrFormat) {
		t.Errorf("%v does not wrap gguf.ErrFormat and formats.ErrFormat", err)
	}
	var fe *formats.FormatError
	if !errors.As(err, &fe) || fe.File != "mem.gguf" {
		t.Errorf("%v is not a *formats.FormatError naming mem.gguf", err)
	}
	if !strings.HasPrefix(err.Error(), "mem.gguf: ") {
		t.Errorf("error %q does not name the file", err)
	}
}

func TestReadTensorAt(t *testing.T) {
	ts := testTensors()
	data := tensorData(ts)
	b, _ := build(t, ts, nil, nil, data)
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	tq := f.Tensors()[1]
	p := make([]byte, 10)
	if n, err := f.ReadTensorAt(&tq, p, tq.Size-4); n != 4 || err == nil {
		t.Errorf("read past the end: %d, %v", n, err)
	}
	if !bytes.Equal(p[:4], data[1][tq.Size-4:]) {
		t.Error("tail bytes differ")
	}
	other := tq
	other.Offset += 32
	if _, err := f.ReadTensorAt(&other, p, 0); err == nil {
		t.Error("foreign tensor accepted")
	}
	rows := make([]byte, 36)
	if err := formats.ReadRows(f, &tq, 1, 1, rows); err != nil || !bytes.Equal(rows, data[1][36:]) {
		t.Errorf("ReadRows: %v", err)
	}
}
