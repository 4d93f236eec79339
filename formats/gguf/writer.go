package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// WriterOptions adjusts the layout NewWriter produces; the zero value (or
// nil) writes what stable-diffusion.cpp's converter writes, given the same
// descriptors and TrimDims set.
type WriterOptions struct {
	// Alignment is the data alignment, a power of two. Zero means the
	// general.alignment value in the metadata, or DefaultAlignment (32).
	// When it is not 32 and the metadata lacks general.alignment, the writer
	// appends general.alignment (u32) after the given entries, since a reader
	// cannot find the data otherwise; a general.alignment in the metadata
	// that disagrees with Alignment is an error.
	Alignment int
	// TrimDims drops trailing dims of 1 (ggml order) like ggml_n_dims, down
	// to one dim: torch [1, 64] is stored with n_dims 1, ne [64]. sd-cli and
	// ggml's writer do this; false keeps every dim of the shape.
	TrimDims bool
	// PadEnd pads the data after the last tensor to the alignment, as
	// ggml's gguf_write_to_file does; sd-cli writes no padding there.
	PadEnd bool
}

// Writer streams a GGUF v3 file whose header is computed up front from the
// tensor descriptors. It implements formats.TensorWriter.
type Writer struct {
	w io.Writer
	// prefix is the header up to the tensor records (magic, counts,
	// metadata); the records are encoded from in as the header is written,
	// not held (on a header of 500k tensors they are tens of megabytes).
	prefix    []byte
	headerLen int64 // the whole header, records and padding included
	trim      bool  // WriterOptions.TrimDims
	// in is the caller's descriptor list, kept rather than copied (a copy
	// per tensor was most of a header-heavy file's memory): names, types
	// and shapes come from it, sizes and offsets from size and rel.
	in      []formats.Tensor
	size    []int64 // data bytes of each tensor
	rel     []int64 // offsets relative to the data section
	dataEnd int64   // data section size, with the end padding if any

	headerDone bool
	cur        int   // tensor receiving data
	curDone    int64 // bytes of it written
	dpos       int64 // bytes of the data section written
	err        error
	closed     bool
}

var (
	_ formats.TensorWriter = (*Writer)(nil)
	_ formats.TensorLayout = (*Writer)(nil)
)

// NewWriter validates the descriptors and metadata and computes the header
// and layout. Names of 64 bytes or more, more than 4 dims and nested arrays
// are written as given (some readers refuse them; ggml does), but a zero in
// an outer dim is refused because it crashes ggml's reader. Only the tensors' Name, Type and Shape are used (a non-zero
// Size must match the computed one). The Writer keeps tensors, which must
// not change while it is in use. Nothing is written to w before the first
// Write or Close, so w may be nil when only Header, Layout and Size are
// wanted (for a writer that fills the data at fixed offsets itself).
func NewWriter(w io.Writer, tensors []formats.Tensor, meta formats.Metadata, opts *WriterOptions) (*Writer, error) {
	if opts == nil {
		opts = &WriterOptions{}
	}
	align, meta, err := resolveAlignment(meta, opts.Alignment)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(meta))
	for _, kv := range meta {
		if kv.Key == "" {
			return nil, fmt.Errorf("gguf writer: empty metadata key")
		}
		if seen[kv.Key] {
			return nil, fmt.Errorf("gguf writer: duplicate metadata key %q", kv.Key)
		}
		if strings.IndexByte(kv.Key, 0) >= 0 {
			return nil, fmt.Errorf("gguf writer: metadata key %q contains a NUL byte, which C readers take for its end", kv.Key)
		}
		seen[kv.Key] = true
		if err := checkValue(kv.Type, kv.Value, 0); err != nil {
			return nil, fmt.Errorf("gguf writer: metadata key %q: %v", kv.Key, err)
		}
	}

	// Sized up front: appending would copy the layout log2(n) times, which
	// dominated the memory of files of many small tensors.
	gw := &Writer{w: w, in: tensors, size: make([]int64, 0, len(tensors)), rel: make([]int64, 0, len(tensors))}
	b := append([]byte(nil), Magic...)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(meta)))
	for _, kv := range meta {
		b = appendString(b, kv.Key)
		b = binary.LittleEndian.AppendUint32(b, uint32(kv.Type))
		b = appendValue(b, kv.Type, kv.Value)
	}

	gw.prefix, gw.trim = b, opts.TrimDims
	hlen := int64(len(b))
	var nb [MaxDims]int64
	names := formats.NewNameIndex(len(tensors), func(i int) string { return tensors[i].Name })
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if names.Add(i) >= 0 {
			return nil, fmt.Errorf("gguf writer: tensor %q: duplicate name", t.Name)
		}
		// ggml copies names into C strings: a NUL would cut the name short
		// there and could make two tensors one.
		if strings.IndexByte(t.Name, 0) >= 0 {
			return nil, fmt.Errorf("gguf writer: tensor %q: name contains a NUL byte, which C readers take for its end", t.Name)
		}
		if !t.Type.IsGGML() {
			return nil, fmt.Errorf("gguf writer: tensor %q: type %s is not a ggml type", t.Name, t.Type)
		}
		if len(t.Shape) > MaxDims {
			return nil, fmt.Errorf("gguf writer: tensor %q: %d dims, more than %d", t.Name, len(t.Shape), MaxDims)
		}
		if len(t.Name) > maxString {
			return nil, fmt.Errorf("gguf writer: tensor %q: name of %d bytes is too long", t.Name[:64], len(t.Name))
		}
		size, err := t.Type.Bytes(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("gguf writer: tensor %q: %v", t.Name, err)
		}
		if t.Size != 0 && t.Size != size {
			return nil, fmt.Errorf("gguf writer: tensor %q: size %d, but %s %v takes %d bytes", t.Name, t.Size, t.Type, t.Shape, size)
		}
		ne := storedDims(nb[:0], t.Shape, opts.TrimDims)
		for j := 1; j < len(ne); j++ {
			if ne[j] == 0 {
				// ggml's reader divides by ne[1..3] when it checks the element
				// count, and dies of SIGFPE on a zero there.
				return nil, fmt.Errorf("gguf writer: tensor %q: shape %v has a zero outside the row dim, which crashes ggml's reader", t.Name, t.Shape)
			}
		}
		hlen += infoSize(t.Name, ne)
		gw.rel = append(gw.rel, off)
		gw.size = append(gw.size, size)
		if off > math.MaxInt64/2-pad(size, align) {
			return nil, fmt.Errorf("gguf writer: tensor %q: data section overflows", t.Name)
		}
		off += pad(size, align)
	}
	gw.headerLen = pad(hlen, align)
	if n := len(gw.size); n > 0 {
		gw.dataEnd = gw.rel[n-1] + gw.size[n-1]
		if opts.PadEnd {
			gw.dataEnd = pad(gw.dataEnd, align)
		}
	}
	return gw, nil
}

// resolveAlignment picks the alignment and returns the metadata to write
// (a copy with general.alignment appended when it is needed).
func resolveAlignment(meta formats.Metadata, want int) (int64, formats.Metadata, error) {
	if want < 0 || want > math.MaxUint32 || want&(want-1) != 0 {
		return 0, nil, fmt.Errorf("gguf writer: alignment %d is not a power of two", want)
	}
	kv, ok := meta.Get(AlignmentKey)
	if ok {
		v, isU32 := kv.Value.(uint32)
		if kv.Type != formats.TypeUint32 || !isU32 {
			return 0, nil, fmt.Errorf("gguf writer: %s must be a u32, got %s", AlignmentKey, kv.Type)
		}
		if v == 0 || v&(v-1) != 0 {
			return 0, nil, fmt.Errorf("gguf writer: %s = %d is not a power of two", AlignmentKey, v)
		}
		if want != 0 && int64(v) != int64(want) {
			return 0, nil, fmt.Errorf("gguf writer: %s = %d but the writer's alignment is %d", AlignmentKey, v, want)
		}
		return int64(v), meta, nil
	}
	if want == 0 || want == DefaultAlignment {
		return DefaultAlignment, meta, nil
	}
	out := append(formats.Metadata(nil), meta...)
	out = append(out, formats.KV{Key: AlignmentKey, Type: formats.TypeUint32, Value: uint32(want)})
	return int64(want), out, nil
}

// infoSize is the size of a tensor's record in the header: name, dims,
// type and offset, as appendInfo encodes them.
func infoSize(name string, ne []int64) int64 {
	return 8 + int64(len(name)) + 4 + 8*int64(len(ne)) + 4 + 8
}

// appendInfo appends tensor i's record (name, dims, type, offset).
func (w *Writer) appendInfo(b []byte, i int) []byte {
	t := &w.in[i]
	var nb [MaxDims]int64
	ne := storedDims(nb[:0], t.Shape, w.trim)
	b = appendString(b, t.Name)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ne)))
	for _, d := range ne {
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(t.Type))
	return binary.LittleEndian.AppendUint64(b, uint64(w.rel[i]))
}

// storedDims appends to ne (usually empty, with room for MaxDims) the
// ggml-order dims written for a torch-order shape: a scalar becomes [1];
// trim drops trailing ones like ggml_n_dims.
func storedDims(ne, shape []int64, trim bool) []int64 {
	for i := range shape {
		ne = append(ne, shape[len(shape)-1-i])
	}
	if len(ne) == 0 {
		ne = append(ne, 1)
	}
	if trim {
		for len(ne) > 1 && ne[len(ne)-1] == 1 {
			ne = ne[:len(ne)-1]
		}
	}
	return ne
}

// checkValue verifies that v is the Go value formats.KV documents for t.
func checkValue(t formats.ValueType, v any, depth int) error {
	ok := false
	switch t {
	case formats.TypeUint8:
		_, ok = v.(uint8)
	case formats.TypeInt8:
		_, ok = v.(int8)
	case formats.TypeUint16:
		_, ok = v.(uint16)
	case formats.TypeInt16:
		_, ok = v.(int16)
	case formats.TypeUint32:
		_, ok = v.(uint32)
	case formats.TypeInt32:
		_, ok = v.(int32)
	case formats.TypeFloat32:
		_, ok = v.(float32)
	case formats.TypeBool:
		_, ok = v.(bool)
	case formats.TypeString:
		_, ok = v.(string)
	case formats.TypeUint64:
		_, ok = v.(uint64)
	case formats.TypeInt64:
		_, ok = v.(int64)
	case formats.TypeFloat64:
		_, ok = v.(float64)
	case formats.TypeArray:
		a, isArr := v.(formats.Array)
		if !isArr {
			break
		}
		return checkArray(a, depth)
	default:
		return fmt.Errorf("unknown value type %d", uint32(t))
	}
	if !ok {
		return fmt.Errorf("value of Go type %T for GGUF type %s", v, t)
	}
	return nil
}

func checkArray(a formats.Array, depth int) error {
	// The same bound as the reader's: what one accepts, the other does.
	if depth >= maxArrayDepth {
		return fmt.Errorf("arrays nested more than %d deep", maxArrayDepth)
	}
	ok := false
	switch a.Elem {
	case formats.TypeUint8:
		_, ok = a.Values.([]uint8)
	case formats.TypeInt8:
		_, ok = a.Values.([]int8)
	case formats.TypeUint16:
		_, ok = a.Values.([]uint16)
	case formats.TypeInt16:
		_, ok = a.Values.([]int16)
	case formats.TypeUint32:
		_, ok = a.Values.([]uint32)
	case formats.TypeInt32:
		_, ok = a.Values.([]int32)
	case formats.TypeFloat32:
		_, ok = a.Values.([]float32)
	case formats.TypeBool:
		_, ok = a.Values.([]bool)
	case formats.TypeString:
		_, ok = a.Values.([]string)
	case formats.TypeUint64:
		_, ok = a.Values.([]uint64)
	case formats.TypeInt64:
		_, ok = a.Values.([]int64)
	case formats.TypeFloat64:
		_, ok = a.Values.([]float64)
	case formats.TypeArray:
		subs, isArr := a.Values.([]formats.Array)
		if !isArr {
			break
		}
		for i, s := range subs {
			if err := checkArray(s, depth+1); err != nil {
				return fmt.Errorf("element %d: %v", i, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("array of unknown value type %d", uint32(a.Elem))
	}
	if !ok {
		return fmt.Errorf("array values of Go type %T for elements of type %s", a.Values, a.Elem)
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendValue encodes a value already checked by checkValue.
func appendValue(b []byte, t formats.ValueType, v any) []byte {
	le := binary.LittleEndian
	switch x := v.(type) {
	case uint8:
		return append(b, x)
	case int8:
		return append(b, byte(x))
	case bool:
		if x {
			return append(b, 1)
		}
		return append(b, 0)
	case uint16:
		return le.AppendUint16(b, x)
	case int16:
		return le.AppendUint16(b, uint16(x))
	case uint32:
		return le.AppendUint32(b, x)
	case int32:
		return le.AppendUint32(b, uint32(x))
	case float32:
		return le.AppendUint32(b, math.Float32bits(x))
	case uint64:
		return le.AppendUint64(b, x)
	case int64:
		return le.AppendUint64(b, uint64(x))
	case float64:
		return le.AppendUint64(b, math.Float64bits(x))
	case string:
		return appendString(b, x)
	case formats.Array:
		b = le.AppendUint32(b, uint32(x.Elem))
		b = le.AppendUint64(b, uint64(x.Len()))
		switch vs := x.Values.(type) {
		case []string:
			for _, s := range vs {
				b = appendString(b, s)
			}
		case []formats.Array:
			for _, s := range vs {
				b = appendValue(b, formats.TypeArray, s)
			}
		case []uint8:
			b = append(b, vs...)
		default:
			b = appendSlice(b, vs)
		}
		return b
	}
	return b
}

// appendSlice encodes the fixed-size typed slices other than []uint8.
func appendSlice(b []byte, vs any) []byte {
	switch s := vs.(type) {
	case []int8:
		for _, x := range s {
			b = append(b, byte(x))
		}
	case []bool:
		for _, x := range s {
			b = appendValue(b, formats.TypeBool, x)
		}
	case []uint16:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint16(b, x)
		}
	case []int16:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint16(b, uint16(x))
		}
	case []uint32:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
	case []int32:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
	case []float32:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	case []uint64:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
	case []int64:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
	case []float64:
		for _, x := range s {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
	}
	return b
}

// Header returns the encoded header, padding included: the bytes before
// the first tensor's data.
func (w *Writer) Header() []byte {
	b := make([]byte, 0, w.headerLen)
	b = append(b, w.prefix...)
	for i := range w.in {
		b = w.appendInfo(b, i)
	}
	return append(b, make([]byte, w.headerLen-int64(len(b)))...)
}

// Layout returns the output tensors with their absolute offsets and sizes
// (File is empty: the writer does not know the output's name).
func (w *Writer) Layout() []formats.Tensor {
	out := make([]formats.Tensor, len(w.in))
	for i := range w.in {
		out[i] = w.TensorAt(i)
	}
	return out
}

// NumTensors returns the number of tensors of the layout.
func (w *Writer) NumTensors() int { return len(w.in) }

// TensorAt returns Layout()[i] without building the whole layout.
func (w *Writer) TensorAt(i int) formats.Tensor {
	t := &w.in[i]
	return formats.Tensor{
		Name: t.Name, Type: t.Type, Shape: t.Shape[:len(t.Shape):len(t.Shape)],
		Offset: w.headerLen + w.rel[i], Size: w.size[i],
	}
}

// Size returns the total number of bytes the file will have.
func (w *Writer) Size() int64 { return w.headerLen + w.dataEnd }

var zeros [4096]byte

func (w *Writer) zeros(n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		m, err := w.w.Write(zeros[:k])
		w.dpos += int64(m)
		if err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (w *Writer) writeHeader() error {
	if w.headerDone {
		return nil
	}
	w.headerDone = true
	// Encoded in blocks of records, so that the header is never held whole.
	b := append(make([]byte, 0, max(len(w.prefix), 64<<10)), w.prefix...)
	n := int64(0)
	for i := range w.in {
		if len(b) >= 60<<10 {
			if _, err := w.w.Write(b); err != nil {
				return err
			}
			n, b = n+int64(len(b)), b[:0]
		}
		b = w.appendInfo(b, i)
	}
	b = append(b, make([]byte, w.headerLen-n-int64(len(b)))...)
	_, err := w.w.Write(b)
	return err
}

// skipComplete moves cur past tensors whose data is all written.
func (w *Writer) skipComplete() {
	for w.cur < len(w.size) && w.curDone == w.size[w.cur] {
		w.cur++
		w.curDone = 0
	}
}

// Write appends tensor data in layout order, inserting the padding between
// tensors; writing more than the tensors hold is an error.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, fmt.Errorf("gguf writer: write after Close")
	}
	if err := w.writeHeader(); err != nil {
		w.err = err
		return 0, err
	}
	total := 0
	for len(p) > 0 {
		w.skipComplete()
		if w.cur == len(w.size) {
			w.err = fmt.Errorf("gguf writer: %d bytes more than the %d tensors hold", len(p), len(w.size))
			return total, w.err
		}
		if w.curDone == 0 && w.dpos < w.rel[w.cur] {
			if err := w.zeros(w.rel[w.cur] - w.dpos); err != nil {
				w.err = err
				return total, err
			}
		}
		k := min(int64(len(p)), w.size[w.cur]-w.curDone)
		m, err := w.w.Write(p[:k])
		total += m
		w.curDone += int64(m)
		w.dpos += int64(m)
		if err != nil {
			w.err = fmt.Errorf("gguf writer: tensor %q: %w", w.in[w.cur].Name, err)
			return total, w.err
		}
		p = p[k:]
	}
	return total, nil
}

// Close checks that every tensor's data was written and writes the bytes
// that end the file (zero-size tensors at the end, PadEnd padding). It does
// not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	if err := w.writeHeader(); err != nil {
		w.err = err
		return err
	}
	w.skipComplete()
	if w.cur < len(w.size) {
		w.err = fmt.Errorf("gguf writer: tensor %q: %d of its %d bytes written: %w", w.in[w.cur].Name, w.curDone, w.size[w.cur], ErrIncomplete)
		return w.err
	}
	if err := w.zeros(w.dataEnd - w.dpos); err != nil {
		w.err = err
		return err
	}
	w.closed = true
	return nil
}
