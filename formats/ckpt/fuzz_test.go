package ckpt

import (
	"bytes"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func pickleSeeds() [][]byte {
	seeds := [][]byte{
		wrapped(sample, false),
		wrapped(sample, true),
		one(f32x6),
		one(tspec{class: "FloatStorage", key: "r", numel: 8, size: []int64{2}, legacy: true, view: []any{"v", int64(4), int64(4)}}),
		newPickle(2).stateDict([]tspec{{name: "f8", key: "0", numel: 6, size: []int64{2, 2}, v3dtype: "float8_e4m3fn"}}).stop(),
		legacyMagicPickle(),
		[]byte("\x80\x02ccollections\nOrderedDict\n]((K\x01K\x02t\x85R."),
		[]byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x01a\x94\x8c\x01b\x94\x93."),
		[]byte("L119547037146038801333356L\n."),
		[]byte("\x80\x02cos\nsystem\n."),
		nested(70),
		// Crafted inputs of issue 14: memo indexes that keep doubling, lists
		// of empty dicts, many tensors aliasing one storage.
		memoDoubling(22),
		dictLists(3, 300),
		newPickle(2).stateDict(aliases(8)).stop(),
	}
	return seeds
}

// FuzzUnpickle runs the restricted unpickler and the tensor collection on
// arbitrary streams: no panic, lengths never trusted beyond the input, and
// every tensor it accepts lies inside its storage with a size that matches
// its type and shape.
func FuzzUnpickle(f *testing.F) {
	for _, s := range pickleSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := newSource(bytes.NewReader(data), 0, int64(len(data)))
		v, storages, err := unpickle(src)
		if src.pos > int64(len(data)) {
			t.Fatalf("consumed %d of %d bytes", src.pos, len(data))
		}
		if err != nil {
			return
		}
		for k, s := range storages {
			if s.key != k || s.numel < 0 {
				t.Fatalf("storage %q: %+v", k, s)
			}
		}
		const spanOff, spanSize = 1000, 4096
		file := &File{path: "fuzz.ckpt", size: spanOff + spanSize}
		err = file.build(v, func(string) storageSpan { return storageSpan{off: spanOff, size: spanSize} })
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, tn := range file.Tensors() {
			if seen[tn.Name] {
				t.Fatalf("tensor %q listed twice", tn.Name)
			}
			seen[tn.Name] = true
			want, err := tn.Type.Bytes(tn.Shape)
			if err != nil || want != tn.Size {
				t.Fatalf("tensor %q: size %d, type %s and shape %v give %d (%v)", tn.Name, tn.Size, tn.Type, tn.Shape, want, err)
			}
			if tn.Offset < spanOff || tn.Offset+tn.Size > spanOff+spanSize {
				t.Fatalf("tensor %q: [%d, +%d) outside its storage", tn.Name, tn.Offset, tn.Size)
			}
		}
	})
}

// FuzzParse opens arbitrary files as checkpoints: no panic, and every
// tensor accepted can be read in full from inside the file.
func FuzzParse(f *testing.F) {
	// Small seeds: the fuzzer minimizes every new input it keeps, one byte
	// at a time, and inputs grown from the 3.7 KB archive of the whole
	// sample kept the worker minimizing for most of its time (5 executions
	// counted in 100 s). Two tensors sharing a storage cover the paths.
	small := []tspec{sample[0], sample[2]}
	data, elem := storagesFor(small)
	f.Add(buildZip(f, "a", newPickle(2).stateDict(small).stop(), data))
	f.Add(buildLegacy(newPickle(2).stateDict(legacyOf(small)).stop(), keysOf(small), data, elem))
	f.Add([]byte("PK\x03\x04"))
	f.Add(memoDoubling(22))
	f.Add(append(legacyMagicPickle(), memoDoubling(8)...))
	// Aliasing (issue 14, item 8) in a small archive: four tensors view
	// one 16-byte storage.
	many := []tspec{}
	for i := range 4 {
		many = append(many, tspec{name: "w" + string(rune('A'+i)), class: "FloatStorage", key: "0", numel: 4, size: []int64{4}})
	}
	data, _ = storagesFor(many[:1])
	f.Add(buildZip(f, "a", newPickle(2).stateDict(many).stop(), data))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(bytes.NewReader(b), int64(len(b)), "fuzz.ckpt")
		if err != nil {
			return
		}
		for _, tn := range file.Tensors() {
			if tn.Offset < 0 || tn.Size < 0 || tn.Offset+tn.Size > int64(len(b)) {
				t.Fatalf("tensor %q [%d, +%d) outside a %d-byte file", tn.Name, tn.Offset, tn.Size, len(b))
			}
			got, err := formats.ReadTensor(file, &tn)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, b[tn.Offset:tn.Offset+tn.Size]) {
				t.Fatalf("tensor %q: ReadTensor differs from the file", tn.Name)
			}
		}
	})
}

// legacyOf returns a copy of ts marked for the legacy format.
func legacyOf(ts []tspec) []tspec {
	out := append([]tspec(nil), ts...)
	for i := range out {
		out[i].legacy = true
	}
	return out
}
