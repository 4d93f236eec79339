package gguf

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
)

// hb builds GGUF bytes by hand, so that malformed files can be made
// independently of the writer.
type hb struct{ b []byte }

func (h *hb) u32(v uint32) *hb { h.b = binary.LittleEndian.AppendUint32(h.b, v); return h }
func (h *hb) u64(v uint64) *hb { h.b = binary.LittleEndian.AppendUint64(h.b, v); return h }
func (h *hb) str(s string) *hb { h.u64(uint64(len(s))); h.b = append(h.b, s...); return h }
func (h *hb) raw(p ...byte) *hb {
	h.b = append(h.b, p...)
	return h
}

// head starts a v3 file with the given counts.
func head(nTensors, nKV uint64) *hb {
	h := &hb{}
	h.raw([]byte("GGUF")...).u32(3).u64(nTensors).u64(nKV)
	return h
}

// info appends a tensor info; ne in ggml order.
func (h *hb) info(name string, typ formats.DType, off uint64, ne ...uint64) *hb {
	h.str(name).u32(uint32(len(ne)))
	for _, d := range ne {
		h.u64(d)
	}
	return h.u32(uint32(typ)).u64(off)
}

// data pads to 32 and appends n bytes of tensor data.
func (h *hb) data(n int) []byte {
	for len(h.b)%32 != 0 {
		h.b = append(h.b, 0)
	}
	return append(h.b, make([]byte, n)...)
}

func kvU32(h *hb, key string, v uint32) *hb { return h.str(key).u32(uint32(formats.TypeUint32)).u32(v) }

// malformedCase is a file the reader must refuse with an error containing want.
type malformedCase struct {
	name string
	file []byte
	want string
}

func malformedCases() []malformedCase {
	return []malformedCase{
		{"empty", nil, "truncated at offset 0 while reading magic"},
		{"magic", []byte("GGML\x03\x00\x00\x00"), `not a GGUF file (magic "GGML")`},
		{"v0", (&hb{}).raw([]byte("GGUF")...).u32(0).u64(0).u64(0).b, "bad GGUF version 0"},
		{"v1", (&hb{}).raw([]byte("GGUF")...).u32(1).u64(0).u64(0).b, "version 1 is not supported"},
		{"v4", (&hb{}).raw([]byte("GGUF")...).u32(4).u64(0).u64(0).b, "version 4 is not supported"},
		{"byte-swapped", (&hb{}).raw([]byte("GGUF")...).u32(0x03000000).u64(0).u64(0).b, "endianness"},
		{"kv count 2^60", head(0, 1<<60).b, "metadata count at offset 16 is 1152921504606846976"},
		{"tensor count 2^60", head(1<<60, 0).b, "tensor count at offset 8 is 1152921504606846976"},
		{"unknown value type", head(0, 1).str("k").u32(13).u32(0).b, `key "k" has unknown value type 13`},
		{"empty key", head(0, 1).str("").u32(uint32(formats.TypeUint8)).raw(1).b, "metadata entry 0 has an empty key"},
		{"duplicate key", kvU32(kvU32(head(0, 2), "k", 1), "k", 2).b, `duplicate metadata key "k" (entries 0 and 1)`},
		{"key length past end", head(0, 1).u64(1 << 40).raw(make([]byte, 20)...).b, "key of metadata entry 0 at offset 24 has length 1099511627776, past the end"},
		{"string past end", head(0, 1).str("k").u32(uint32(formats.TypeString)).u64(1 << 62).b, `value of "k" at offset 37 has length 4611686018427387904, past the end`},
		{"array past end", head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(uint32(formats.TypeInt32)).u64(1 << 61).b, `array length of "k" at offset 41 is 2305843009213693952`},
		{"string array past end", head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(uint32(formats.TypeString)).u64(1 << 40).b, `array length of "k"`},
		{"nested array past end", head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(uint32(formats.TypeArray)).u64(1 << 40).b, `array length of "k"`},
		{"array unknown type", head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(99).u64(0).b, `array of unknown value type 99`},
		{"alignment type", head(0, 1).str(AlignmentKey).u32(uint32(formats.TypeUint64)).u64(64).b, "general.alignment has type u64, want u32"},
		{"alignment 0", kvU32(head(0, 1), AlignmentKey, 0).b, "general.alignment = 0 is not a power of two"},
		{"alignment 48", kvU32(head(0, 1), AlignmentKey, 48).b, "general.alignment = 48 is not a power of two"},
		{"duplicate tensor", head(2, 0).info("w", formats.F32, 0, 8).info("w", formats.F32, 32, 8).data(64), `tensor "w": duplicate tensor name (tensors 0 and 1)`},
		{"too many dims", head(1, 0).info("w", formats.F32, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1).data(4), `tensor "w": 9 dimensions`},
		{"negative dim", head(1, 0).info("w", formats.F32, 0, 1<<63).data(4), `tensor "w": dimension 0 is negative`},
		{"element overflow", head(1, 0).info("w", formats.F32, 0, 1<<40, 1<<40).data(4), `tensor "w": shape [1099511627776 1099511627776] overflows`},
		{"removed type id", head(1, 0).info("w", formats.DType(4), 0, 32).data(32), `tensor "w": unknown or removed ggml type id 4`},
		{"unknown type id", head(1, 0).info("w", formats.DType(77), 0, 32).data(32), `tensor "w": unknown or removed ggml type id 77`},
		{"row not a block multiple", head(1, 0).info("w", formats.Q4_K, 0, 128, 2).data(144), `tensor "w": row of 128 elements is not a multiple of the q4_K block size 256`},
		{"scalar of a block type", head(1, 0).info("w", formats.Q8_0, 0).data(34), `tensor "w": row of 1 elements`},
		{"misaligned offset", head(2, 0).info("a", formats.F32, 0, 4).info("b", formats.F32, 16, 4).data(64), `tensor "b": offset 16 is not a multiple of the alignment 32`},
		{"misaligned offset 64", kvU32(head(2, 1), AlignmentKey, 64).info("a", formats.F32, 0, 4).info("b", formats.F32, 32, 4).data(128), `tensor "b": offset 32 is not a multiple of the alignment 64`},
		{"data past end", head(1, 0).info("w", formats.F32, 0, 16).data(63), `tensor "w": data [`},
		{"offset past end", head(1, 0).info("w", formats.F32, 1<<62, 16).data(64), `tensor "w": data [`},
		{"overlap", head(2, 0).info("a", formats.F32, 0, 16).info("b", formats.F32, 32, 4).data(64), `tensor "b": data [`},
		{"truncated infos", head(1, 0).str("w").u32(2).u64(4).b, `file truncated at offset 45 while reading dimensions of tensor "w"`},
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range malformedCases() {
		_, err := parseBytes(c.file)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), "mem.gguf: ") {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
	}
}

// TestHugeCountsFailFast checks that absurd counts and lengths are refused
// from the bytes left, before anything of their size is allocated.
func TestHugeCountsFailFast(t *testing.T) {
	files := [][]byte{
		head(1<<60, 0).b,
		head(0, 1<<60).b,
		head(0, 1).str("k").u32(uint32(formats.TypeString)).u64(1 << 62).b,
		head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(uint32(formats.TypeUint8)).u64(1 << 62).raw(make([]byte, 100)...).b,
		head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(uint32(formats.TypeString)).u64(1 << 59).raw(make([]byte, 100)...).b,
		// A tensor count that fits a large (sparse) file: nothing of its
		// size may be reserved before the infos are actually read.
		append(head(1<<20, 0).b, make([]byte, 30<<20)...),
		head(0, 1<<20).raw(make([]byte, 30<<20)...).b,
		// Counts that do fit the (claimed) file size but not the real data:
		// the size bound must come from the real size.
		head(1000, 1000).raw(make([]byte, 1000)...).b,
	}
	for i, b := range files {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		if _, err := parseBytes(b); err == nil {
			t.Errorf("file %d accepted", i)
		}
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Errorf("file %d: parsing allocated %d bytes", i, d)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("file %d: parsing took %v", i, d)
		}
	}
}

// validSmall is a small valid file with metadata of several types and a
// last tensor that ends at the end of the file, so that every strict
// prefix is invalid.
func validSmall(t testing.TB) []byte {
	ts := []formats.Tensor{
		{Name: "a", Type: formats.F16, Shape: []int64{2, 3}},
		{Name: "q", Type: formats.Q8_0, Shape: []int64{32}},
	}
	meta := formats.Metadata{
		{Key: "s", Type: formats.TypeString, Value: "xy"},
		{Key: "n", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeArray, Values: []formats.Array{{Elem: formats.TypeUint16, Values: []uint16{1, 2}}}}},
		{Key: "as", Type: formats.TypeArray, Value: formats.Array{Elem: formats.TypeString, Values: []string{"p", "qr"}}},
		{Key: "f", Type: formats.TypeFloat64, Value: 1.0},
	}
	b, _ := build(t, ts, meta, nil, tensorData(ts))
	return b
}

func TestTruncatedEverywhere(t *testing.T) {
	b := validSmall(t)
	if _, err := parseBytes(b); err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		if _, err := parseBytes(b[:n]); err == nil {
			t.Errorf("prefix of %d of %d bytes accepted", n, len(b))
		}
	}
}

func TestWarnings(t *testing.T) {
	// Aligned, in the file and not overlapping, but not in info order: read,
	// reported as not packed.
	b := head(2, 0).info("a", formats.F32, 32, 4).info("b", formats.F32, 0, 4).data(64)
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Packed() {
		t.Error("out-of-order data reported as packed")
	}
	if w := f.Info().Warnings; len(w) != 1 || !strings.Contains(w[0], "not packed") {
		t.Errorf("warnings %q", w)
	}
	// Trailing bytes past the padding, and a bool byte that is not 0 or 1.
	b = head(1, 1).str("b").u32(uint32(formats.TypeBool)).raw(2).info("a", formats.F32, 0, 4).data(100)
	f, err = parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Metadata().Get("b"); v.Value != true {
		t.Errorf("bool 2 read as %v", v.Value)
	}
	if w := f.Info().Warnings; len(w) != 2 || !strings.Contains(w[0], "bool byte 2") || !strings.Contains(w[1], "84 bytes after") {
		t.Errorf("warnings %q", w)
	}
	if !f.Packed() {
		t.Error("packed file reported as not packed")
	}
}

func TestZeroDimWarning(t *testing.T) {
	f, err := parseBytes(head(1, 0).info("z", formats.F32, 0, 4, 0).data(0))
	if err != nil {
		t.Fatal(err)
	}
	if w := f.Info().Warnings; len(w) != 1 || !strings.Contains(w[0], `tensor "z": dimension 1 is zero`) {
		t.Errorf("warnings %q", w)
	}
}

func TestVersion2(t *testing.T) {
	b := validSmall(t)
	binary.LittleEndian.PutUint32(b[4:], 2)
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Info().Version != 2 {
		t.Errorf("version %d", f.Info().Version)
	}
}

func TestDeepNesting(t *testing.T) {
	h := head(0, 1).str("k").u32(uint32(formats.TypeArray))
	for range 100 {
		h.u32(uint32(formats.TypeArray)).u64(1)
	}
	h.u32(uint32(formats.TypeUint8)).u64(0)
	if _, err := parseBytes(h.b); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep nesting: %v", err)
	}
}

// prefixZeros reads as b followed by zeros up to any size: a huge file
// without the disk space.
type prefixZeros []byte

func (z prefixZeros) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(z)) {
		copy(p, z[off:])
	}
	return len(p), nil
}

func TestArrayLimit(t *testing.T) {
	b := head(0, 1).str("k").u32(uint32(formats.TypeArray)).u32(uint32(formats.TypeUint32)).u64(1 << 29).b
	_, err := Parse(prefixZeros(b), 1<<40, "big.gguf")
	if err == nil || !strings.Contains(err.Error(), `big.gguf: metadata key "k": array of 536870912 u32 values is larger than the limit`) {
		t.Errorf("2 GiB array: %v", err)
	}
}
