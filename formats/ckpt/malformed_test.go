package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// one pickles {"w": tensor} for a single tensor spec.
func one(ts tspec) []byte {
	ts.name = "w"
	return newPickle(2).stateDict([]tspec{ts}).stop()
}

var f32x6 = tspec{class: "FloatStorage", key: "0", numel: 6, size: []int64{2, 3}}

func with(f func(*tspec)) tspec {
	t := f32x6
	f(&t)
	return t
}

func nested(n int) []byte {
	p := newPickle(2)
	for range n {
		p.op(']')
	}
	for range n - 1 {
		p.op('a')
	}
	return p.stop()
}

// TestMalformedPickle: each broken stream gives an error that names the
// file, the record and the problem, and never panics.
func TestMalformedPickle(t *testing.T) {
	cases := []struct {
		name string
		pkl  []byte
		want string
	}{
		{"unknown opcode", []byte("\x80\x02\xff."), "byte 2: unsupported pickle opcode 0xff"},
		{"text opcode", []byte("\x80\x02S'x'\n."), "unsupported pickle opcode 0x53"},
		{"protocol 6", []byte("\x80\x06N."), "unsupported pickle protocol 6"},
		{"os.system", []byte("\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R."), "byte 2: global os.system is not allowed"},
		{"builtins.eval", []byte("\x80\x04\x8c\x08builtins\x8c\x04eval\x93."), "global builtins.eval is not allowed"},
		{"exec in a tensor's place", append(newPickle(2).op('}', '(').str("w").b, "c__builtin__\nexec\n)Ru."...), "global __builtin__.exec is not allowed"},
		{"torch global not allowed", []byte("\x80\x02ctorch._utils\n_rebuild_qtensor\n."), "global torch._utils._rebuild_qtensor is not allowed"},
		{"empty stack at STOP", []byte("\x80\x02."), "byte 2: stack underflow"},
		{"SETITEM underflow", []byte("\x80\x02}K\x01s."), "stack underflow"},
		{"underflow across a mark", []byte("\x80\x02K\x01(\x85."), "stack underflow"},
		{"TUPLE without MARK", []byte("\x80\x02K\x01t."), "no MARK on the stack"},
		{"no STOP", []byte("\x80\x02K\x01"), "pickle is truncated"},
		{"truncated string", []byte("\x80\x02X\x10\x00\x00\x00abc"), "pickle is truncated"},
		{"huge string length", []byte("\x80\x02X\xff\xff\xff\xffabc."), "pickle is truncated"},
		{"huge BINUNICODE8", []byte("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."), "pickle is truncated"},
		{"huge LONG4", []byte("\x80\x02\x8b\xff\xff\xff\x7f."), "longer than 1024"},
		{"memo miss", []byte("\x80\x02h\x07."), "memo entry 7 is not defined"},
		{"REDUCE on an int", []byte("\x80\x02K\x01)R."), "call of a int"},
		{"REDUCE with non-tuple", []byte("\x80\x02ccollections\nOrderedDict\nK\x01R."), "called with a int, want a tuple"},
		{"BUILD on an int", []byte("\x80\x02K\x01}b."), "BUILD on a int is not supported"},
		{"APPEND to a dict", []byte("\x80\x02}K\x01a."), "APPEND to a dict"},
		{"SETITEMS odd", []byte("\x80\x02}(K\x01u."), "odd number"},
		{"unhashable key", []byte("\x80\x02}(]K\x01u."), "unhashable dict key of type list"},
		{"STACK_GLOBAL non-strings", []byte("\x80\x04K\x01K\x02\x93."), "want two strings"},
		{"module persistent id", []byte("\x80\x02X\x06\x00\x00\x00module\x85Q."), `persistent id of kind "module" is not supported`},
		{"persistent id not a tuple", []byte("\x80\x02K\x01Q."), "persistent id is a int"},
		{"storage class not allowed", []byte("\x80\x02(X\x07\x00\x00\x00storageK\x01X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ."), "storage type is a int"},
		{"deep nesting", nested(200), "nested more than 64 deep"},
		{"too many dims", one(with(func(t *tspec) { t.size = make([]int64, 17); t.stride = make([]int64, 17) })), `tensor "w": size has 17 dims`},
		{"non-contiguous", one(with(func(t *tspec) { t.stride = []int64{1, 2} })), `tensor "w": is not contiguous (size [2 3], stride [1 2])`},
		{"negative dim", one(with(func(t *tspec) { t.size = []int64{-1, 3}; t.stride = []int64{3, 1} })), `tensor "w": size [-1 3] overflows`},
		{"elements past the storage", one(with(func(t *tspec) { t.offset = 1 })), `tensor "w": elements [1, 7) run past its storage "0" of 24 bytes`},
		{"storage past its record", one(with(func(t *tspec) { t.numel = 100 })), `tensor "w": storage "0" of 100 elements needs 400 bytes, but its record has 24`},
		{"missing record", one(with(func(t *tspec) { t.key = "9" })), `tensor "w": storage record archive/data/9 is missing`},
		{"untyped storage with v2", []byte("\x80\x02}(X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nUntypedStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x18tQK\x00K\x06\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRu."), `tensor "w": an untyped storage needs _rebuild_tensor_v3`},
		{"rebuild with few args", []byte("\x80\x02}(X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\nK\x01\x85Ru."), `tensor "w": _rebuild_tensor_v2 has 1 arguments, want at least 6`},
	}
	data := map[string][]byte{"0": make([]byte, 24)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseBytes(t, buildZip(t, "archive", c.pkl, data), "bad.ckpt")
			wantErr(t, err, c.want)
			if !strings.HasPrefix(err.Error(), "bad.ckpt: ") {
				t.Errorf("error %q does not start with the file name", err)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %q does not wrap ErrFormat", err)
			}
		})
	}
}

// TestMalformedContainer covers problems of the zip and legacy containers.
func TestMalformedContainer(t *testing.T) {
	data := map[string][]byte{"0": make([]byte, 24)}
	good := one(f32x6)
	legacy := func(mutate func([]byte) []byte) []byte {
		ts := f32x6
		ts.legacy = true
		b := buildLegacy(one(ts), []string{"0"}, data, map[string]int{"0": 4})
		return mutate(b)
	}
	var bigEndianZip bytes.Buffer
	zw := newZipWriter(&bigEndianZip)
	zw.add(t, "archive/data.pkl", good)
	zw.add(t, "archive/byteorder", []byte("big"))
	zw.add(t, "archive/data/0", data["0"])
	zw.close(t)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"compressed storage", buildZip(t, "archive", good, nil, zipEntry{name: "archive/data/0", data: data["0"], deflate: true}),
			`bad.ckpt: tensor "w": storage record archive/data/0 is compressed (zip method 8)`},
		{"big-endian zip", bigEndianZip.Bytes(), `byte order "big" is not supported`},
		{"no data.pkl", buildZipNoPkl(t), "zip archive has no data.pkl record"},
		{"truncated zip", buildZip(t, "archive", good, data)[:100], "reading the zip directory"},
		{"not a checkpoint", []byte("hello world"), "not a zip or legacy PyTorch checkpoint"},
		{"other pickle", []byte("\x80\x02K\x01."), "does not start with torch's pickled magic number"},
		{"legacy ok", legacy(func(b []byte) []byte { return b }), ""},
		{"legacy truncated data", legacy(func(b []byte) []byte { return b[:len(b)-1] }), `storage "0" of 6 elements at offset`},
		{"legacy truncated count", legacy(func(b []byte) []byte { return b[:len(b)-24-3] }), `storage "0" at offset`},
		{"legacy count mismatch", legacy(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[len(b)-32:], 5)
			return b
		}), `storage "0" has 5 elements in the file but 6 in the pickle`},
		{"legacy huge count", legacy(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[len(b)-32:], 1<<62)
			return b
		}), "runs past the end of the file"},
		{"legacy trailing bytes", legacy(func(b []byte) []byte { return append(b, 1, 2, 3) }), ""},
		{"legacy unreferenced key", buildLegacy(one(with(func(t *tspec) { t.legacy = true })), []string{"0", "x"}, map[string][]byte{"0": data["0"], "x": {}}, map[string]int{"0": 4, "x": 4}),
			`storage "x" is listed but no tensor refers to it`},
		{"legacy missing key", buildLegacy(one(with(func(t *tspec) { t.legacy = true })), nil, nil, nil), `tensor "w": storage "0" is not in the storage key list`},
		{"legacy big-endian", bytes.Replace(legacy(func(b []byte) []byte { return b }), []byte("little_endian\x71\x02\x88"), []byte("little_endian\x71\x02\x89"), 1),
			"written on a big-endian machine"},
		{"legacy wrong protocol", append(append(legacyMagicPickle(), newPickle(2).int(1000).stop()...), legacy(func(b []byte) []byte { return b })[40:]...),
			"legacy protocol version 1000 is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := parseBytes(t, c.file, "bad.ckpt")
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(f.Tensors()) != 1 {
					t.Fatalf("tensors %+v", f.Tensors())
				}
				return
			}
			wantErr(t, err, c.want)
			if !strings.HasPrefix(err.Error(), "bad.ckpt: ") {
				t.Errorf("error %q does not start with the file name", err)
			}
		})
	}
}

// TestReadBounds: reads outside a tensor and reads of a shrunk file fail
// with the file and tensor named.
func TestReadBounds(t *testing.T) {
	data := map[string][]byte{"0": make([]byte, 24)}
	file := buildZip(t, "archive", one(f32x6), data)
	f, err := parseBytes(t, file, "m.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	tn := f.Tensors()[0]
	if _, err := f.ReadTensorAt(&tn, make([]byte, 8), 20); err == nil || !strings.Contains(err.Error(), `m.ckpt: tensor "w": read [20, 28) outside its 24 bytes`) {
		t.Errorf("read past the tensor: %v", err)
	}
	short := bytes.NewReader(file[:tn.Offset+10])
	f.r = short
	if _, err := f.ReadTensorAt(&tn, make([]byte, 24), 0); err == nil || !strings.Contains(err.Error(), `m.ckpt: tensor "w": unexpected EOF`) {
		t.Errorf("read of a shrunk file: %v", err)
	}
}

// TestGlobalNameQuoted: a global with raw bytes in its name is quoted in the error.
func TestGlobalNameQuoted(t *testing.T) {
	_, err := parseBytes(t, buildZip(t, "archive", []byte("\x80\x02cos\x01\nsys\xfftem\n."), nil), "bad.ckpt")
	wantErr(t, err, `global "os\x01.sys\xfftem" is not allowed`)
}
