//go:build cgo

package gguf

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/native/ggmltest"
)

// ggmlMeta is allValues without what ggml refuses (arrays of arrays).
func ggmlMeta() formats.Metadata {
	var out formats.Metadata
	for _, kv := range allValues() {
		if a, ok := kv.Value.(formats.Array); ok && a.Elem == formats.TypeArray {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// ggmlTensors has one tensor of every type the linked ggml knows, at most
// 4 dims, short names, plus a scalar, a [1, N] and a zero-size tensor.
func ggmlTensors() []formats.Tensor {
	var ts []formats.Tensor
	for _, dt := range formats.Types() {
		if !dt.InLinkedGGML() {
			continue
		}
		bs := int64(dt.Info().BlockSize)
		ts = append(ts, formats.Tensor{Name: "blk." + dt.String() + ".weight", Type: dt, Shape: []int64{2, 3, 2 * bs}})
	}
	return append(ts,
		formats.Tensor{Name: "scalar", Type: formats.F32},
		formats.Tensor{Name: "row", Type: formats.F16, Shape: []int64{1, 64}},
		formats.Tensor{Name: "conv", Type: formats.F16, Shape: []int64{4, 1, 3, 3}},
		formats.Tensor{Name: "zero", Type: formats.F32, Shape: []int64{4, 0}},
		formats.Tensor{Name: "last", Type: formats.Q8_0, Shape: []int64{1, 32}},
	)
}

// compareWithGGML opens path with our reader and with ggml's and checks
// that both see the same header, metadata and tensors.
func compareWithGGML(t *testing.T, path string) {
	t.Helper()
	ours, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	theirs, err := ggmltest.ReadGGUF(path)
	if err != nil {
		t.Fatalf("ggml refused our file: %v", err)
	}
	info := ours.Info()
	if theirs.Version != info.Version || theirs.Alignment != info.Alignment || theirs.DataOffset != info.DataOffset {
		t.Errorf("ggml: version %d alignment %d data offset %d; ours %d %d %d",
			theirs.Version, theirs.Alignment, theirs.DataOffset, info.Version, info.Alignment, info.DataOffset)
	}
	if !reflect.DeepEqual([]formats.KV(ours.Metadata()), theirs.KVs) && !(len(ours.Metadata()) == 0 && len(theirs.KVs) == 0) {
		t.Errorf("metadata differs:\nggml %+v\nours %+v", theirs.KVs, ours.Metadata())
	}
	if len(theirs.Tensors) != len(ours.Tensors()) {
		t.Fatalf("ggml sees %d tensors, we see %d", len(theirs.Tensors), len(ours.Tensors()))
	}
	for i, g := range theirs.Tensors {
		o := ours.Tensors()[i]
		ne := [4]int64{1, 1, 1, 1}
		copy(ne[:], ours.NE(i))
		if g.Name != o.Name || g.Type != o.Type || g.NE != ne || g.Offset != o.Offset-info.DataOffset || g.Size != o.Size {
			t.Errorf("tensor %d: ggml %s %s ne %v at %d+%d; ours %s %s ne %v at %d+%d", i,
				g.Name, g.Type, g.NE, g.Offset, g.Size, o.Name, o.Type, ne, o.Offset-info.DataOffset, o.Size)
		}
	}
}

func TestGGMLReadsOurFiles(t *testing.T) {
	dir := t.TempDir()
	ts := ggmlTensors()
	data := tensorData(ts)
	for _, align := range []int{32, 64} {
		for _, trim := range []bool{false, true} {
			for _, padEnd := range []bool{false, true} {
				for _, meta := range []formats.Metadata{nil, ggmlMeta()} {
					name := fmt.Sprintf("a%d-trim%v-pad%v-kv%d", align, trim, padEnd, len(meta))
					t.Run(name, func(t *testing.T) {
						b, _ := build(t, ts, meta, &WriterOptions{Alignment: align, TrimDims: trim, PadEnd: padEnd}, data)
						path := filepath.Join(dir, name+".gguf")
						if err := os.WriteFile(path, b, 0o644); err != nil {
							t.Fatal(err)
						}
						compareWithGGML(t, path)
					})
				}
			}
		}
	}
}

// TestGGMLReadsGolden cross-checks our reader with ggml's on sd-cli's
// files. Their names are longer than a stock ggml accepts, so each file is
// first re-written through NewWriter in sd-cli's layout with short names.
func TestGGMLReadsGolden(t *testing.T) {
	dir := t.TempDir()
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var descs []formats.Tensor
			var data [][]byte
			for i, tt := range f.Tensors() {
				b, err := formats.ReadTensor(f, &tt)
				if err != nil {
					t.Fatal(err)
				}
				data = append(data, b)
				descs = append(descs, formats.Tensor{Name: fmt.Sprintf("t%d.%s", i, tt.Type), Type: tt.Type, Shape: tt.Shape})
			}
			b, _ := build(t, descs, f.Metadata(), &WriterOptions{TrimDims: true}, data)
			out := filepath.Join(dir, filepath.Base(path))
			if err := os.WriteFile(out, b, 0o644); err != nil {
				t.Fatal(err)
			}
			compareWithGGML(t, out)
		})
	}
}

// TestGGMLRefuses checks that ggml also refuses the malformed files where
// it is expected to, and that it refuses the files we accept on purpose
// (more than 4 dims, nested arrays, unpacked data). Cases where ggml aborts
// the process (empty key, a non-u32 general.alignment) or may try a huge
// allocation (lengths past the end) are left out.
func TestGGMLRefuses(t *testing.T) {
	skip := map[string]bool{
		"empty": true, "empty key": true, "alignment type": true,
		"key length past end": true, "string past end": true, "array past end": true,
		"string array past end": true, "nested array past end": true,
		// ggml does not check the data against the file size with no_alloc.
		"data past end": true,
	}
	dir := t.TempDir()
	check := func(name string, b []byte) {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".gguf")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ggmltest.ReadGGUF(path); err == nil {
			t.Errorf("%s: ggml accepted the file", name)
		}
	}
	for _, c := range malformedCases() {
		if !skip[c.name] {
			check(c.name, c.file)
		}
	}
	five := []formats.Tensor{{Name: "five", Type: formats.F32, Shape: []int64{2, 1, 1, 1, 2}}}
	b, _ := build(t, five, nil, nil, tensorData(five))
	check("five dims", b)
	b, _ = build(t, nil, allValues(), nil, nil)
	check("nested array", b)
	b = head(2, 0).info("a", formats.F32, 32, 4).info("b", formats.F32, 0, 4).data(64)
	if f, err := parseBytes(b); err != nil || f.Packed() {
		t.Fatalf("unpacked file: %v", err)
	}
	check("unpacked", b)
}
