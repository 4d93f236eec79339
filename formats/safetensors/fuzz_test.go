package safetensors

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sdtool/sdtool/formats"
)

// FuzzParse checks that Parse never panics, that it agrees with the same
// parser run on json.Decoder's tokens, and that whatever it accepts obeys
// the format's invariants and survives a rewrite unchanged.
func FuzzParse(f *testing.F) {
	seeds := [][]formats.Tensor{
		nil,
		{{Name: "w", Type: formats.F32, Shape: []int64{2, 3}}},
		{{Name: "a", Type: formats.F16, Shape: []int64{4}}, {Name: "s", Type: formats.BF16, Shape: []int64{}}, {Name: "e", Type: formats.F8_E4M3, Shape: []int64{0, 3}}},
		{{Name: "f4", Type: formats.F4, Shape: []int64{2, 2}}, {Name: "f6", Type: formats.F6_E3M2, Shape: []int64{4}}, {Name: "i", Type: formats.I64, Shape: []int64{1}}},
	}
	for i, ts := range seeds {
		var meta map[string]string
		if i%2 == 1 {
			meta = map[string]string{"format": "pt", "k": "v"}
		}
		b, _ := writeAll(f, ts, meta, &WriterOptions{NoPadding: i == 3})
		f.Add(b)
	}
	f.Add(raw(`{"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, []byte{1, 2, 3, 4, 5}))
	f.Add(raw(`{"x":{"dtype":"U8","shape":[2],"data_offsets":[10,8]}}`, make([]byte, 10)))
	f.Add(raw(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{}}`, make([]byte, 4)))
	f.Add(raw(`{"__metadata__":{"a":1}}`, nil))
	f.Add(raw(`{"t":{"dtype":"F64","shape":[1000000000000,1000000000],"data_offsets":[0,8]}}`, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSameAsDecoder(t, data)
		checkStreamed(t, data)
		file, err := parseBytes(data, "fuzz.safetensors")
		if err != nil {
			return
		}
		ts := file.Tensors()
		start := file.Info().DataOffset
		var total int64
		for i := range ts {
			tn := &ts[i]
			if tn.Offset < start || tn.Offset+tn.Size > int64(len(data)) {
				t.Fatalf("tensor %q [%d, +%d) outside the data of a %d-byte file", tn.Name, tn.Offset, tn.Size, len(data))
			}
			want, err := tn.Type.Bytes(tn.Shape)
			if err != nil || want != tn.Size {
				t.Fatalf("tensor %q: size %d, type and shape give %d (%v)", tn.Name, tn.Size, want, err)
			}
			got, err := formats.ReadTensor(file, tn)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data[tn.Offset:tn.Offset+tn.Size]) {
				t.Fatalf("tensor %q: ReadTensor differs from the file", tn.Name)
			}
			total += tn.Size
		}
		// Contiguity: the tensors tile the data section exactly up to its end.
		if extra := int64(len(data)) - start - total; extra < 0 || (extra > 0) != hasTrailingWarning(file) {
			t.Fatalf("%d bytes beyond the tensors, warnings %q", extra, file.Info().Warnings)
		}

		// Rewrite in offset order (the writer packs in the given order) and read back.
		order := slices.Clone(ts)
		slices.SortStableFunc(order, func(a, b formats.Tensor) int { return cmpInt(a.Offset, b.Offset) })
		meta := map[string]string{}
		for _, kv := range file.Metadata() {
			meta[kv.Key] = kv.Value.(string)
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, order, meta, nil)
		if err != nil {
			if slices.ContainsFunc(order, func(t formats.Tensor) bool { return strings.IndexByte(t.Name, 0) >= 0 }) {
				return // names with NUL are read but never written (issue 14, item 12)
			}
			t.Fatalf("rewrite: %v", err)
		}
		for i := range order {
			if _, err := w.Write(data[order[i].Offset : order[i].Offset+order[i].Size]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := parseBytes(buf.Bytes(), "fuzz.safetensors")
		if err != nil {
			t.Fatalf("rewrite does not parse: %v", err)
		}
		if !slices.EqualFunc(again.Tensors(), order, func(a, b formats.Tensor) bool {
			return a.Name == b.Name && a.Type == b.Type && slices.Equal(a.Shape, b.Shape) && a.Size == b.Size
		}) {
			t.Fatalf("rewrite changed the tensors")
		}
		if len(again.Metadata()) != len(meta) {
			t.Fatalf("rewrite changed the metadata")
		}
		for _, kv := range again.Metadata() {
			if v, ok := meta[kv.Key]; !ok || v != kv.Value {
				t.Fatalf("rewrite changed metadata %q", kv.Key)
			}
		}
	})
}

func hasTrailingWarning(f *File) bool {
	for _, w := range f.Info().Warnings {
		if bytes.Contains([]byte(w), []byte("after the end of the tensor data")) {
			return true
		}
	}
	return false
}

// maxTokenizerFuzz bounds FuzzTokenizer's inputs: every tokenizer state
// (nesting, escapes, numbers, errors at any point) is reached in far fewer
// bytes, and the fuzzer minimizes each new input with O(n²) calls, which
// on inputs of kilobytes stalled both workers for most of a minute (14k
// executions a minute; over 100k with the bound).
const maxTokenizerFuzz = 256

// FuzzTokenizer checks the tokenizer against json.Decoder on valid UTF-8,
// and the tokenizer fed in pieces against itself fed whole.
func FuzzTokenizer(f *testing.F) {
	for _, s := range []string{`{"a":[1,-2.5e3,"x\n",true,null,{}]}`, `{"a" 1}`, `[1,]`, `{"\u00e9":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxTokenizerFuzz || !utf8.Valid(b) {
			return // the caller of tokenizer rejects invalid UTF-8 first
		}
		got := tokenTrace(newTokenizer(string(b)))
		want := tokenTrace(jsonDecoder(string(b)))
		if !slices.Equal(got, want) {
			t.Fatalf("%q:\n got %q\nwant %q", b, got, want)
		}
		checkStreamTokens(t, string(b))
	})
}

// FuzzIndex parses arbitrary index.json data: no panic, and every shard
// accepted is a plain file name in the index's folder.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(indexJSON([2]string{"a", "m-00001-of-00002.safetensors"}, [2]string{"b", "m-00002-of-00002.safetensors"})))
	for _, s := range []string{"../outside/secret.safetensors", "../../../../dev/zero", "/dev/zero", `a\b.safetensors`, "..", "."} {
		f.Add([]byte(indexJSON([2]string{"s", s})))
	}
	f.Add([]byte(`{"weight_map":{"a":"x","a":"y"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := parseIndex("fuzz.index.json", data)
		if err != nil {
			return
		}
		for _, e := range idx.entries {
			if e.file == "" || e.file == "." || e.file == ".." || strings.ContainsAny(e.file, `/\`) {
				t.Fatalf("tensor %q: shard %q accepted", e.tensor, e.file)
			}
		}
	})
}
