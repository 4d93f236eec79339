package ckpt

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"testing"
)

func load(t *testing.T, b []byte) any {
	t.Helper()
	v, _, err := unpickle(newSource(bytes.NewReader(b), 0, int64(len(b))))
	if err != nil {
		t.Fatalf("%d-byte stream: %v", len(b), err)
	}
	return v
}

// TestOpcodes checks the value of small streams whose meaning follows
// from the pickle opcode definitions.
func TestOpcodes(t *testing.T) {
	cases := []struct {
		name string
		pkl  string
		want any
	}{
		{"BININT", "\x80\x02J\xfe\xff\xff\xff.", int64(-2)},
		{"BININT2", "\x80\x02M\x34\x12.", int64(0x1234)},
		{"LONG1 negative", "\x80\x02\x8a\x02\x00\xff.", int64(-256)},
		{"LONG1 empty", "\x80\x02\x8a\x00.", int64(0)},
		{"LONG4", "\x80\x02\x8b\x01\x00\x00\x00\x7f.", int64(127)},
		{"text INT", "I-12\n.", int64(-12)},
		{"text bool", "I01\n.", true},
		{"text LONG", "L42L\n.", int64(42)},
		{"BINFLOAT", "\x80\x02G\x3f\xf8\x00\x00\x00\x00\x00\x00.", 1.5},
		{"BINBYTES", "\x80\x03C\x02ab.", []byte("ab")},
		{"SHORT_BINSTRING", "U\x02ab.", "ab"},
		{"FRAME and MEMOIZE", "\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x01a\x94h\x00\x86.", pyTuple{"a", "a"}},
		{"DUP POP", "\x80\x02K\x01\x32K\x020\x86.", pyTuple{int64(1), int64(1)}},
		{"POP_MARK", "\x80\x02K\x07(K\x01K\x021.", int64(7)},
		{"POP of a bare mark", "\x80\x02K\x07(0.", int64(7)},
		{"sparse memo", "\x80\x02K\x05r\x00\x00\x00\x7fj\x00\x00\x00\x7f\x86.", pyTuple{int64(5), int64(5)}},
		{"memo overwrite", "\x80\x02K\x01q\x00K\x02q\x00h\x00.", int64(2)},
		{"torch.Size", "\x80\x02ctorch\nSize\nK\x02K\x03\x86\x85R.", pyTuple{int64(2), int64(3)}},
		{"NONE TRUE FALSE", "\x80\x02N\x88\x89\x87.", pyTuple{nil, true, false}},
		{"list", "\x80\x02](K\x01K\x02eK\x03a.", &pyList{items: []any{int64(1), int64(2), int64(3)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := load(t, []byte(c.pkl)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

// TestDicts: dict semantics the tensor collection relies on.
func TestDicts(t *testing.T) {
	// A repeated key replaces the value in place.
	d := load(t, []byte("\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00bK\x02X\x01\x00\x00\x00aK\x03u.")).(*pyDict)
	if !reflect.DeepEqual(d.keys, []any{"a", "b"}) || !reflect.DeepEqual(d.vals, []any{int64(3), int64(2)}) {
		t.Errorf("dict %v %v", d.keys, d.vals)
	}
	// OrderedDict from a list of pairs, and NEWOBJ of OrderedDict.
	d = load(t, []byte("\x80\x02ccollections\nOrderedDict\n](X\x01\x00\x00\x00kK\x09\x86e\x85R.")).(*pyDict)
	if v, ok := d.lookup("k"); !ok || v != int64(9) {
		t.Errorf("OrderedDict pairs: %v", d.vals)
	}
	if _, ok := load(t, []byte("\x80\x02ccollections\nOrderedDict\n)\x81.")).(*pyDict); !ok {
		t.Error("NEWOBJ OrderedDict")
	}
	// A float NaN key never matches itself, as in Python.
	d = load(t, []byte("\x80\x02}(G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x01G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x02u.")).(*pyDict)
	if len(d.keys) != 2 || !math.IsNaN(d.keys[0].(float64)) {
		t.Errorf("NaN keys %v", d.keys)
	}
}

// TestSourcePosition: the legacy reader relies on the position after STOP.
func TestSourcePosition(t *testing.T) {
	b := []byte("\x80\x02K\x01.\x80\x02K\x02.rest")
	src := newSource(bytes.NewReader(b), 0, int64(len(b)))
	for want := int64(1); want <= 2; want++ {
		v, _, err := unpickle(src)
		if err != nil || v != want {
			t.Fatalf("pickle %d: %v %v", want, v, err)
		}
	}
	if src.pos != int64(len(b)-4) {
		t.Errorf("position %d, want %d", src.pos, len(b)-4)
	}
}

// TestMemoCount: MEMOIZE numbers entries by how many are defined, also when
// an index first stored far off (sparse) is later covered by the dense part.
// CPython loads the same stream as (7, 8).
func TestMemoCount(t *testing.T) {
	put := func(p []byte, i uint32) []byte { return binary.LittleEndian.AppendUint32(append(p, 'r'), i) }
	get := func(p []byte, i uint32) []byte { return binary.LittleEndian.AppendUint32(append(p, 'j'), i) }
	p := put([]byte("\x80\x02K\x09"), 3000) // sparse: far beyond the empty dense part
	for i := range uint32(3200) {
		if i != 3000 {
			p = put(p, i) // the dense part grows past 3000
		}
	}
	p = put(append(p, "0K\x07"...), 3000) // overwrite: still 3200 entries
	p = append(p, "0K\x08\x940"...)       // MEMOIZE stores at 3200
	p = append(get(get(p, 3000), 3200), "\x86."...)
	if got := load(t, p); !reflect.DeepEqual(got, pyTuple{int64(7), int64(8)}) {
		t.Errorf("got %#v", got)
	}
}
