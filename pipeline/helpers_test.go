package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"syscall"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/memmodel"
)

// memModel is the shared in-memory model (internal/memmodel) under this
// package's names; ReadErr, when set, fails reads of the named tensor.
type memModel struct{ *memmodel.Model }

func newMemModel(path string) *memModel { return &memModel{memmodel.New(path, "mem")} }

// add appends a tensor with the given raw data.
func (m *memModel) add(name string, typ formats.DType, shape []int64, data []byte) formats.Tensor {
	return m.Add(name, typ, shape, data)
}

// fileModel reads tensors from a raw file at the descriptors' offsets with
// ReadAt, the way the real readers do on the streaming path.
type fileModel struct {
	f       *os.File
	tensors []formats.Tensor
}

func (m *fileModel) Path() string { return m.f.Name() }
func (m *fileModel) Info() formats.Info {
	return formats.Info{Format: "raw", Files: []string{m.f.Name()}}
}
func (m *fileModel) Tensors() []formats.Tensor  { return m.tensors }
func (m *fileModel) Metadata() formats.Metadata { return nil }
func (m *fileModel) Close() error               { return m.f.Close() }
func (m *fileModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	if off+int64(len(p)) > t.Size {
		return 0, io.ErrUnexpectedEOF
	}
	return m.f.ReadAt(p, t.Offset+off)
}

// fakeAlign is the data alignment of the fake format.
const fakeAlign = 32

// fakeWriter is a small format in the spirit of GGUF: a header listing every
// tensor with its offset, then the data, each tensor aligned to 32 bytes,
// no padding after the last. The header is written lazily on the first
// Write (or Close), as a streaming writer may.
type fakeWriter struct {
	w         io.Writer
	header    []byte
	layout    []formats.Tensor
	size      int64
	cur       int   // current tensor
	left      int64 // bytes left in the current tensor
	pos       int64 // bytes written so far
	headerOut bool
}

func fakeHeader(tensors []formats.Tensor) ([]byte, []formats.Tensor, int64) {
	var h bytes.Buffer
	h.WriteString("FAKE")
	binary.Write(&h, binary.LittleEndian, uint32(len(tensors)))
	layout := make([]formats.Tensor, len(tensors))
	var off int64
	for i, t := range tensors {
		if i > 0 {
			off = (off + fakeAlign - 1) / fakeAlign * fakeAlign
		}
		binary.Write(&h, binary.LittleEndian, uint32(len(t.Name)))
		h.WriteString(t.Name)
		binary.Write(&h, binary.LittleEndian, uint16(t.Type))
		binary.Write(&h, binary.LittleEndian, uint64(t.Size))
		binary.Write(&h, binary.LittleEndian, uint64(off))
		layout[i] = t
		layout[i].Offset = off
		off += t.Size
	}
	for h.Len()%fakeAlign != 0 {
		h.WriteByte(0)
	}
	for i := range layout {
		layout[i].Offset += int64(h.Len())
	}
	return h.Bytes(), layout, int64(h.Len()) + off
}

func newFakeWriter(w io.Writer, tensors []formats.Tensor) (formats.TensorWriter, error) {
	h, layout, size := fakeHeader(tensors)
	fw := &fakeWriter{w: w, header: h, layout: layout, size: size, cur: -1}
	fw.next()
	return fw, nil
}

func (fw *fakeWriter) emit(p []byte) error {
	n, err := fw.w.Write(p)
	fw.pos += int64(n)
	return err
}

// next advances to the next tensor with data, skipping empty ones.
func (fw *fakeWriter) next() {
	fw.cur++
	for fw.cur < len(fw.layout) && fw.layout[fw.cur].Size == 0 {
		fw.cur++
	}
	if fw.cur < len(fw.layout) {
		fw.left = fw.layout[fw.cur].Size
	}
}

func (fw *fakeWriter) Write(p []byte) (int, error) {
	if !fw.headerOut {
		if err := fw.emit(fw.header); err != nil {
			return 0, err
		}
		fw.headerOut = true
	}
	written := 0
	for len(p) > 0 {
		if fw.cur >= len(fw.layout) {
			return written, errors.New("fake writer: data past the last tensor")
		}
		t := fw.layout[fw.cur]
		if pad := t.Offset - fw.pos; fw.left == t.Size && pad > 0 {
			if err := fw.emit(make([]byte, pad)); err != nil {
				return written, err
			}
		}
		n := int(min(int64(len(p)), fw.left))
		if err := fw.emit(p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
		fw.left -= int64(n)
		if fw.left == 0 {
			fw.next()
		}
	}
	return written, nil
}

func (fw *fakeWriter) Close() error {
	if !fw.headerOut {
		if err := fw.emit(fw.header); err != nil {
			return err
		}
		fw.headerOut = true
	}
	if fw.cur < len(fw.layout) {
		return fmt.Errorf("fake writer: tensor %q incomplete", fw.layout[fw.cur].Name)
	}
	// Empty tensors at the end still sit at aligned offsets.
	if pad := fw.size - fw.pos; pad > 0 {
		return fw.emit(make([]byte, pad))
	}
	return nil
}

func (fw *fakeWriter) Layout() []formats.Tensor { return fw.layout }
func (fw *fakeWriter) Size() int64              { return fw.size }

// readFake parses a fake-format file into name -> data, checking the layout.
func readFake(t testing.TB, path string) ([]string, map[string][]byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseFake(t, path, b)
}

// parseFake parses the bytes b of a fake file (named path in failures).
func parseFake(t testing.TB, path string, b []byte) ([]string, map[string][]byte) {
	t.Helper()
	if len(b) < 8 || string(b[:4]) != "FAKE" {
		t.Fatalf("%s: not a fake file", path)
	}
	n := int(binary.LittleEndian.Uint32(b[4:]))
	p := 8
	type ent struct {
		name      string
		size, off int64
	}
	var ents []ent
	for range n {
		l := int(binary.LittleEndian.Uint32(b[p:]))
		p += 4
		name := string(b[p : p+l])
		p += l + 2
		size := int64(binary.LittleEndian.Uint64(b[p:]))
		off := int64(binary.LittleEndian.Uint64(b[p+8:]))
		p += 16
		ents = append(ents, ent{name, size, off})
	}
	start := int64((p + fakeAlign - 1) / fakeAlign * fakeAlign)
	names := make([]string, 0, n)
	data := map[string][]byte{}
	var end int64 = start
	for _, e := range ents {
		if start+e.off+e.size > int64(len(b)) {
			t.Fatalf("%s: tensor %q past the end", path, e.name)
		}
		names = append(names, e.name)
		data[e.name] = b[start+e.off : start+e.off+e.size]
		end = max(end, start+e.off+e.size)
	}
	if end != int64(len(b)) {
		t.Fatalf("%s: %d bytes, data ends at %d", path, len(b), end)
	}
	return names, data
}

// enospcWriter fails with ENOSPC once more than limit bytes were written,
// like a write(2) on a full disk.
type enospcWriter struct {
	w     io.Writer
	limit int64
	n     int64
}

func (e *enospcWriter) Write(p []byte) (int, error) {
	if e.n+int64(len(p)) > e.limit {
		k := int(e.limit - e.n)
		n, _ := e.w.Write(p[:k])
		e.n += int64(n)
		return n, &os.PathError{Op: "write", Path: "out.partial", Err: syscall.ENOSPC}
	}
	n, err := e.w.Write(p)
	e.n += int64(n)
	return n, err
}

// f16 conversions for the test codecs (an independent, plain implementation).
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// subnormal: mant * 2^-24
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

func decodeF16(dst []float32, src []byte) error {
	if len(src) != 2*len(dst) {
		return fmt.Errorf("decodeF16: %d bytes for %d values", len(src), len(dst))
	}
	for i := range dst {
		dst[i] = f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return nil
}

// encodeToy is a q8_0-shaped toy codec (blocks of 32: a float32 scale and
// 32 int8 values, 36 bytes); it stands in for real quantizers, which other
// packages test.
const toyBlock, toyBlockBytes = 32, 36

func encodeToy(dst []byte, src []float32, rowLen int) error {
	if rowLen%toyBlock != 0 || len(dst) != len(src)/toyBlock*toyBlockBytes {
		return fmt.Errorf("encodeToy: %d values into %d bytes (rows of %d)", len(src), len(dst), rowLen)
	}
	for b := 0; b < len(src)/toyBlock; b++ {
		blk := src[b*toyBlock : (b+1)*toyBlock]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		out := dst[b*toyBlockBytes:]
		binary.LittleEndian.PutUint32(out, math.Float32bits(d))
		for i, v := range blk {
			q := int8(0)
			if d != 0 {
				q = int8(math.Round(float64(v / d)))
			}
			out[4+i] = byte(q)
		}
	}
	return nil
}

// f16Data returns n pseudo-random f16 values (finite, varied) from seed.
func f16Data(n int, seed uint32) []byte {
	b := make([]byte, 2*n)
	x := seed*2654435761 + 1
	for i := range n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		// exponent 1..29 keeps values finite and normal
		h := uint16(x&0x83ff) | uint16(1+x>>16%29)<<10
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}

// writerFunc makes a TensorWriter for a plan's tensors.
type writerFunc func(w io.Writer, tensors []formats.Tensor) (formats.TensorWriter, error)

// at points p at the output out, written by nw (nil: the fake format),
// reading inputs, and returns it.
func at(p *Plan, out string, nw writerFunc, inputs ...string) *Plan {
	if nw == nil {
		nw = newFakeWriter
	}
	p.Path, p.Inputs = out, inputs
	p.Format = formats.Creator{Name: "fake", Ext: ".fake",
		New: func(w io.Writer, ts []formats.Tensor, _ formats.WriteOptions) (formats.TensorWriter, error) {
			return nw(w, ts)
		}}
	return p
}
