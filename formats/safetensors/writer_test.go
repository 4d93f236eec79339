package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// writeAll writes a file with the given descriptors, filling each tensor
// with pseudo-random bytes, and returns the file and the data per tensor.
// Data is fed in odd-sized pieces that cross tensor boundaries.
func writeAll(t testing.TB, tensors []formats.Tensor, meta map[string]string, opts *WriterOptions) ([]byte, [][]byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, tensors, meta, opts)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var all []byte
	var per [][]byte
	for _, l := range w.Layout() {
		d := make([]byte, l.Size)
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		per = append(per, d)
		all = append(all, d...)
	}
	for len(all) > 0 {
		n := min(len(all), 1+rng.IntN(7))
		if _, err := w.Write(all[:n]); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != w.Size() {
		t.Fatalf("wrote %d bytes, Size() = %d", buf.Len(), w.Size())
	}
	if !bytes.HasPrefix(buf.Bytes(), w.HeaderBytes()) || w.DataOffset() != int64(len(w.HeaderBytes())) {
		t.Fatal("output does not start with HeaderBytes")
	}
	return buf.Bytes(), per
}

func TestRoundTrip(t *testing.T) {
	type tc struct {
		name    string
		tensors []formats.Tensor
		meta    map[string]string
	}
	d := func(name string, typ formats.DType, shape ...int64) formats.Tensor {
		return formats.Tensor{Name: name, Type: typ, Shape: shape}
	}
	cases := []tc{
		{"empty", nil, nil},
		{"metadata only", nil, map[string]string{"format": "pt"}},
		{"one f32", []formats.Tensor{d("w", formats.F32, 3, 5)}, nil},
		{"many dtypes", []formats.Tensor{
			d("z.f16", formats.F16, 4, 4),
			d("a.bf16", formats.BF16, 7),
			d("f4", formats.F4, 2, 6),
			d("f8", formats.F8_E4M3, 3, 3),
			d("f8e5", formats.F8_E5M2, 5),
			d("e8m0", formats.F8_E8M0, 2),
			d("f6", formats.F6_E2M3, 8),
			d("f6b", formats.F6_E3M2, 4),
			d("scalar", formats.F64, []int64{}...),
			d("empty", formats.F32, 0, 16),
			d("i64", formats.I64, 2),
			d("bool", formats.Bool, 3),
			d("u8", formats.U8, 1, 1, 1, 1, 1),
			d("c64", formats.C64, 2),
			d("i8", formats.I8, 9),
		}, map[string]string{"b": "2", "a": "1", "quote\"and\\slash": "line\nbreak\ttab\x01<&>", "uni": "日本"}},
		{"odd names", []formats.Tensor{d("", formats.U8, 1), d("é\"\\/\x1f", formats.U16, 2), d("model.diffusion_model.x", formats.U32, 1)}, nil},
	}
	for _, c := range cases {
		for _, noPad := range []bool{false, true} {
			name := c.name
			if noPad {
				name += "/nopad"
			}
			t.Run(name, func(t *testing.T) {
				b, data := writeAll(t, c.tensors, c.meta, &WriterOptions{Name: "rt.safetensors", NoPadding: noPad})
				n := binary.LittleEndian.Uint64(b)
				if !noPad && n%8 != 0 {
					t.Errorf("header length %d is not a multiple of 8", n)
				}
				hdr := b[8 : 8+n]
				if !json.Valid(hdr) {
					t.Errorf("header is not valid JSON: %s", hdr)
				}
				if noPad && bytes.HasSuffix(hdr, []byte(" ")) {
					t.Errorf("NoPadding header ends with a space: %q", hdr)
				}
				if len(c.meta) == 0 && bytes.Contains(hdr, []byte(metadataKey)) {
					t.Errorf("empty metadata written: %s", hdr)
				}
				f, err := parseBytes(b, "rt.safetensors")
				if err != nil {
					t.Fatal(err)
				}
				if w := f.Info().Warnings; len(w) != 0 {
					t.Errorf("warnings: %q", w)
				}
				got := f.Tensors()
				if len(got) != len(c.tensors) {
					t.Fatalf("%d tensors, want %d", len(got), len(c.tensors))
				}
				for i, g := range got {
					want := c.tensors[i]
					if g.Name != want.Name || g.Type != want.Type || !slices.Equal(g.Shape, want.Shape) {
						t.Errorf("tensor %d = %s %s %v, want %s %s %v", i, g.Name, g.Type, g.Shape, want.Name, want.Type, want.Shape)
					}
					if want.Shape != nil && g.Shape == nil {
						t.Errorf("tensor %q: shape nil", g.Name)
					}
					bytesRead, err := formats.ReadTensor(f, &got[i])
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(bytesRead, data[i]) {
						t.Errorf("tensor %q: data differs", g.Name)
					}
				}
				w, err := NewWriter(nil, c.tensors, c.meta, &WriterOptions{Name: "rt.safetensors", NoPadding: noPad})
				if err != nil {
					t.Fatal(err)
				}
				if !equalTensors(w.Layout(), got) {
					t.Errorf("Layout %+v\n!= read %+v", w.Layout(), got)
				}
				// Metadata in sorted key order, with the exact strings.
				var keys []string
				for k := range c.meta {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				meta := f.Metadata()
				if len(meta) != len(keys) {
					t.Fatalf("metadata %+v, want keys %q", meta, keys)
				}
				for i, kv := range meta {
					if kv.Key != keys[i] || kv.Value != c.meta[keys[i]] || kv.Type != formats.TypeString {
						t.Errorf("metadata %d = %+v, want %q=%q", i, kv, keys[i], c.meta[keys[i]])
					}
				}
			})
		}
	}
}

func TestWriterHeaderBytes(t *testing.T) {
	tensors := []formats.Tensor{
		{Name: "b", Type: formats.F16, Shape: []int64{2}},
		{Name: "a<&>", Type: formats.F32, Shape: []int64{}},
	}
	w, err := NewWriter(nil, tensors, map[string]string{"k": "v"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"__metadata__":{"k":"v"},"b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"a<&>":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`
	for len(want)%8 != 0 {
		want += " "
	}
	if got := string(w.HeaderBytes()[8:]); got != want {
		t.Errorf("header\n got %q\nwant %q", got, want)
	}
	w, _ = NewWriter(nil, tensors[:1], nil, &WriterOptions{NoPadding: true})
	if got, want := string(w.HeaderBytes()[8:]), `{"b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`; got != want {
		t.Errorf("unpadded header\n got %q\nwant %q", got, want)
	}
}

func TestWriterErrors(t *testing.T) {
	const name = "out.safetensors"
	opts := &WriterOptions{Name: name}
	f32 := formats.Tensor{Name: "a", Type: formats.F32, Shape: []int64{2}}
	cases := []struct {
		name    string
		tensors []formats.Tensor
		meta    map[string]string
		want    string
	}{
		{"quantized", []formats.Tensor{f32, {Name: "q", Type: formats.Q4_K, Shape: []int64{256}}}, nil, `tensor "q": type q4_K has no safetensors dtype`},
		{"unknown type", []formats.Tensor{{Name: "u", Type: 999, Shape: []int64{1}}}, nil, `tensor "u": type type(999) has no safetensors dtype`},
		{"duplicate", []formats.Tensor{f32, f32}, nil, `tensor "a": duplicate name`},
		{"reserved", []formats.Tensor{{Name: metadataKey, Type: formats.U8, Shape: []int64{1}}}, nil, `tensor "__metadata__": the name is reserved`},
		{"f4 odd", []formats.Tensor{{Name: "f", Type: formats.F4, Shape: []int64{3}}}, nil, `tensor "f": F4 [3]`},
		{"negative dim", []formats.Tensor{{Name: "n", Type: formats.F16, Shape: []int64{-1}}}, nil, `tensor "n": F16 [-1]: negative dimension`},
		{"overflow", []formats.Tensor{{Name: "o", Type: formats.F64, Shape: []int64{1 << 40, 1 << 30}}}, nil, `tensor "o"`},
		{"bad utf8 name", []formats.Tensor{{Name: "\xff", Type: formats.U8, Shape: []int64{1}}}, nil, "not valid UTF-8"},
		{"bad utf8 meta", nil, map[string]string{"k": "\xfe"}, `metadata "k"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewWriter(&bytes.Buffer{}, c.tensors, c.meta, opts)
			if err == nil || !strings.HasPrefix(err.Error(), name+": ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}

	tensors := []formats.Tensor{f32, {Name: "b", Type: formats.U8, Shape: []int64{3}}}
	t.Run("past end", func(t *testing.T) {
		var buf bytes.Buffer
		w, _ := NewWriter(&buf, tensors, nil, opts)
		if _, err := w.Write(make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		n, err := w.Write(make([]byte, 2))
		if err == nil || n != 0 || !strings.Contains(err.Error(), "past the end") {
			t.Errorf("Write past end = %d, %v", n, err)
		}
		if _, err := w.Write(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(nil); err == nil {
			t.Error("Write after Close succeeded")
		}
	})
	t.Run("incomplete", func(t *testing.T) {
		w, _ := NewWriter(&bytes.Buffer{}, tensors, nil, opts)
		w.Write(make([]byte, 9))
		err := w.Close()
		if err == nil || !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), `tensor "b": only 1 of its 3 bytes`) {
			t.Errorf("Close = %v", err)
		}
	})
	t.Run("nothing written", func(t *testing.T) {
		w, _ := NewWriter(&bytes.Buffer{}, tensors, nil, opts)
		if err := w.Close(); err == nil || !strings.Contains(err.Error(), `tensor "a": only 0 of its 8 bytes`) {
			t.Errorf("Close = %v", err)
		}
	})
	t.Run("underlying error", func(t *testing.T) {
		w, _ := NewWriter(failWriter{}, tensors, nil, opts)
		if _, err := w.Write(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("Write = %v", err)
		}
		if err := w.Close(); err == nil {
			t.Error("Close after a failed write succeeded")
		}
	})
}

type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return 0, errors.New("disk full") }

// TestGoldenRewrite rewrites the safetensors inputs of the sd-cli golden set
// (written by the Hugging Face writer) from their descriptors and data, and
// expects the same bytes: same JSON layout, same padding.
func TestGoldenRewrite(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "sdcli-golden")
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(files) == 0 {
		t.Skip("no golden data in", dir)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if w := f.Info().Warnings; len(w) != 0 {
				t.Errorf("warnings %q", w)
			}
			meta := map[string]string{}
			for _, kv := range f.Metadata() {
				meta[kv.Key] = kv.Value.(string)
			}
			var buf bytes.Buffer
			w, err := NewWriter(&buf, f.Tensors(), meta, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tn := range f.Tensors() {
				d, err := formats.ReadTensor(f, &tn)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write(d); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				n := binary.LittleEndian.Uint64(want)
				t.Errorf("rewrite differs\n got %.300q\nwant %.300q", buf.Bytes()[8:], want[8:8+n])
			}
		})
	}
}

func TestWriterLayoutOnly(t *testing.T) {
	w, err := NewWriter(nil, []formats.Tensor{{Name: "a", Type: formats.U8, Shape: []int64{1}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Size() != w.DataOffset()+1 {
		t.Errorf("Size %d, DataOffset %d", w.Size(), w.DataOffset())
	}
	if _, err := w.Write([]byte{1}); err == nil || !strings.Contains(err.Error(), "no output") {
		t.Errorf("Write with a nil writer: %v", err)
	}
}
