package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// memoDoubling is a legacy-looking pickle of LONG_BINPUT opcodes whose
// indexes keep doubling past the dense memo (issue 14, item 1): n puts in
// about 5n bytes once made the memo slice grow to 2^n entries.
func memoDoubling(n int) []byte {
	b := []byte("\x80\x02K\x00N")
	idx := uint64(1023)
	for range n {
		b = append(b, 'r')
		b = binary.LittleEndian.AppendUint32(b, uint32(min(idx, 1<<32-1)))
		idx = 2*idx + 1025
	}
	return append(b, '.')
}

// dictLists pickles lists lists of perList empty dicts (issue 14, item 2).
func dictLists(lists, perList int) []byte {
	b := []byte("\x80\x02]")
	for range lists {
		b = append(b, ']', '(')
		b = append(b, bytes.Repeat([]byte{'}'}, perList)...)
		b = append(b, 'e', 'a')
	}
	return append(b, '.')
}

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestMemoIndexesDoubling: the 116-byte file neither matches as a
// checkpoint (detection only reads bytes) nor makes the unpickler allocate
// more than the entries it defines.
func TestMemoIndexesDoubling(t *testing.T) {
	file := memoDoubling(22)
	if len(file) != 116 {
		t.Fatalf("crafted file has %d bytes, want 116", len(file))
	}
	path := filepath.Join(t.TempDir(), "any.bin")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	var matched bool
	if n := allocated(func() { matched = Match(path, file) }); n > 1<<20 {
		t.Errorf("detection allocated %d bytes", n)
	}
	if matched {
		t.Error("a pickle of memo puts matched as a legacy checkpoint")
	}
	// The unpickler itself, on a prefix whose last index the old code
	// would have made dense (2^16 entries of 24 bytes per doubling).
	for _, n := range []int{12, 22} {
		data := memoDoubling(n)
		var err error
		got := allocated(func() {
			_, _, err = unpickle(newSource(bytes.NewReader(data), 0, int64(len(data))))
		})
		if err != nil {
			t.Fatalf("%d puts: %v", n, err)
		}
		if got > 1<<20 {
			t.Errorf("%d memo puts allocated %d bytes", n, got)
		}
	}
	if _, err := parseBytes(t, file, "any.bin"); err == nil || !strings.Contains(err.Error(), "magic number") {
		t.Errorf("Parse: %v", err)
	}
}

// TestObjectBudget: a pickle of millions of empty dicts is refused, naming
// the file and the record, before it builds them all.
func TestObjectBudget(t *testing.T) {
	pkl := dictLists(8, 1_000_000)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Deflate})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pkl); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var perr error
	got := allocated(func() { _, perr = parseBytes(t, buf.Bytes(), "bomb.ckpt") })
	if perr == nil || !strings.Contains(perr.Error(), "bomb.ckpt: archive/data.pkl: byte ") || !strings.Contains(perr.Error(), "more than any checkpoint needs") {
		t.Fatalf("error %v", perr)
	}
	if got > 400<<20 {
		t.Errorf("allocated %d MiB before refusing", got>>20)
	}
	// Nested lists reused through the memo make the walk, not the
	// unpickler, do the work: each level appends the level below twice.
	p := newPickle(2)
	p.op(']').put()
	for i := range 40 {
		p.op(']', '(').get(i).get(i).op('e').put()
	}
	if _, err := parseBytes(t, buildZip(t, "archive", p.stop(), nil), "dag.ckpt"); err != nil {
		t.Errorf("shared lists: %v", err)
	}
}

// TestStorageAliases: many tensors viewing one storage are refused once
// they hold more than twice the file; two sharing one stay accepted.
func TestStorageAliases(t *testing.T) {
	ts := aliases(50)
	data, _ := storagesFor(ts)
	_, err := parseBytes(t, buildZip(t, "archive", newPickle(2).stateDict(ts).stop(), data), "alias.ckpt")
	if err == nil || !strings.Contains(err.Error(), "share storages") || !strings.Contains(err.Error(), "alias.ckpt") {
		t.Fatalf("50 aliases: %v", err)
	}
	data, _ = storagesFor(ts[:2])
	if _, err := parseBytes(t, buildZip(t, "archive", newPickle(2).stateDict(ts[:2]).stop(), data), "tied.ckpt"); err != nil {
		t.Errorf("two tensors tied to one storage: %v", err)
	}
}

// TestLegacyHeadForms: the byte-level magic check accepts every protocol's
// encoding of the magic number and nothing else.
func TestLegacyHeadForms(t *testing.T) {
	magic := legacyMagicPickle()
	for _, tc := range []struct {
		head string
		want bool
	}{
		{string(magic), true},
		{"L119547037146038801333356L\n.", true},
		{"\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00" + string(magic[2:]), true},
		{"\x80\x02\x8b\x0a\x00\x00\x00" + string(magic[4:]), true},
		{"L119547037146038801333357L\n.", false},
		{string(magic[:len(magic)-1]), false},
		{"\x80\x02K\x01.", false},
		{"", false},
	} {
		if got := IsLegacyHead([]byte(tc.head)); got != tc.want {
			t.Errorf("IsLegacyHead(%q) = %v", tc.head, got)
		}
	}
}

// aliases is n tensors that each view the whole of one storage.
func aliases(n int) []tspec {
	var ts []tspec
	for i := range n {
		ts = append(ts, tspec{name: "w" + string(rune('A'+i)), class: "FloatStorage", key: "0", numel: 1024, size: []int64{1024}})
	}
	return ts
}

// TestHugeStorageMessage: a storage whose byte size overflows says so, not
// "needs 0 bytes" (issue 14, item 13).
func TestHugeStorageMessage(t *testing.T) {
	ts := tspec{name: "w", class: "FloatStorage", key: "0", numel: 1 << 62, size: []int64{2}}
	data := map[string][]byte{"0": make([]byte, 8)}
	_, err := parseBytes(t, buildZip(t, "archive", one(ts), data), "huge.ckpt")
	if err == nil || strings.Contains(err.Error(), "needs 0 bytes") || !strings.Contains(err.Error(), "4611686018427387904 elements") {
		t.Errorf("error %v", err)
	}
}
