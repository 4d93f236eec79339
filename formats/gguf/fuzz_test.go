package gguf

import (
	"bytes"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and a file
// it accepts must have every tensor aligned and inside the file, be
// readable, and survive a write/parse/write cycle with the same header.
func FuzzParse(f *testing.F) {
	f.Add(validSmall(f))
	f.Add(emptyTensorAt(1<<63 - 32)) // issue 14, item 13
	f.Add(emptyTensorAt(64))
	ts := testTensors()
	b, _ := build(f, ts, allValues(), &WriterOptions{Alignment: 64, PadEnd: true}, tensorData(ts))
	f.Add(b)
	b, _ = build(f, ts[:3], nil, &WriterOptions{TrimDims: true}, tensorData(ts[:3]))
	f.Add(b)
	for _, c := range malformedCases() {
		f.Add(c.file)
	}
	f.Add(head(2, 0).info("a", formats.F32, 32, 4).info("b", formats.F32, 0, 4).data(64))

	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := parseBytes(data)
		if err != nil {
			return
		}
		info := g.Info()
		if info.DataOffset%int64(info.Alignment) != 0 {
			t.Fatalf("data offset %d not aligned to %d", info.DataOffset, info.Alignment)
		}
		var descs []formats.Tensor
		for _, tt := range g.Tensors() {
			if tt.Offset < 0 || tt.Size > 0 && (tt.Offset < info.DataOffset || tt.Offset+tt.Size > int64(len(data))) {
				t.Fatalf("tensor %q at [%d, %d) outside the data of a %d-byte file", tt.Name, tt.Offset, tt.Offset+tt.Size, len(data))
			}
			if (tt.Offset-info.DataOffset)%int64(info.Alignment) != 0 {
				t.Fatalf("tensor %q offset %d not aligned", tt.Name, tt.Offset)
			}
			if _, err := formats.ReadTensor(g, &tt); err != nil {
				t.Fatalf("tensor %q: %v", tt.Name, err)
			}
			descs = append(descs, formats.Tensor{Name: tt.Name, Type: tt.Type, Shape: tt.Shape})
		}
		// Parse then write must be stable: the header written from what we
		// read parses back to the same header (bytes, so NaNs compare).
		w1, err := NewWriter(nil, descs, g.Metadata(), nil)
		if err != nil {
			return // e.g. zero outer dims, which the writer refuses
		}
		h1 := w1.Header()
		g2, err := parseBytes(append(h1, make([]byte, w1.Size()-int64(len(h1)))...))
		if err != nil {
			t.Fatalf("re-written header does not parse: %v", err)
		}
		var descs2 []formats.Tensor
		for _, tt := range g2.Tensors() {
			descs2 = append(descs2, formats.Tensor{Name: tt.Name, Type: tt.Type, Shape: tt.Shape})
		}
		w2, err := NewWriter(nil, descs2, g2.Metadata(), nil)
		if err != nil {
			t.Fatalf("second write: %v", err)
		}
		if !bytes.Equal(h1, w2.Header()) {
			t.Fatalf("header not stable over write/parse/write")
		}
	})
}
