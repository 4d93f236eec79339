package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// maxString bounds a single metadata or name string: far above any real
// key, name or chat template, and it keeps a crafted length from making the
// reader allocate a large part of a multi-gigabyte file.
const maxString = 1 << 28

// maxArrayBytes bounds the data of one fixed-size metadata array (real
// tokenizer arrays take a few MB).
const maxArrayBytes = 1 << 30

// headerBuffer is the bufio size for the sequential header read.
const headerBuffer = 64 << 10

// capHint bounds a preallocation from a count read from the file: counts
// are only checked against the bytes left, and a forged count in a large
// file could otherwise reserve many times the file size up front.
func capHint(n int64) int { return int(min(n, 1<<12)) }

// File is an opened GGUF file: its header, metadata and tensor descriptors,
// with data read on demand. It implements formats.Model.
type File struct {
	path       string
	r          io.ReaderAt
	closer     io.Closer
	size       int64
	version    int
	alignment  int64
	dataOffset int64
	meta       formats.Metadata
	tensors    []formats.Tensor
	byName     *formats.NameIndex // positions in tensors by name
	packed     bool
	warnings   []string
}

var _ formats.Model = (*File)(nil)

// Open opens one GGUF file. Use OpenModel to open a split GGUF as a whole.
func Open(path string) (*File, error) {
	g, f, err := formats.OpenFile(path, Parse, func() error { return formatError(path, "", "is a directory") })
	if err != nil {
		return nil, err
	}
	g.closer = f
	return g, nil
}

// Parse reads the header of a GGUF file of size bytes from r; name is used
// in errors and as the File of every tensor. The returned File reads tensor
// data from r; its Close does nothing.
func Parse(r io.ReaderAt, size int64, name string) (*File, error) {
	p := &parser{
		br:   bufio.NewReaderSize(io.NewSectionReader(r, 0, size), headerBuffer),
		size: size,
		name: name,
	}
	g := &File{path: name, r: r, size: size}
	if err := p.header(g); err != nil {
		return nil, err
	}
	return g, nil
}

// parser reads the header sequentially and tracks the position, so that
// every count can be checked against the bytes left before allocating.
type parser struct {
	br    *bufio.Reader
	pos   int64
	size  int64
	name  string
	buf   [8]byte
	buf8s [MaxDims]int64 // one tensor's ne, in file order
	warn  []string
	// sbuf is the buffer short strings are read into, and dims the array shapes
	// are cut from: a header of many tensors then costs one string and a
	// share of an array per tensor, not a buffer and two slices.
	sbuf []byte
	dims []int64
}

func (p *parser) errorf(format string, args ...any) error {
	return formatError(p.name, "", fmt.Sprintf(format, args...))
}

func (p *parser) tensorErrorf(tensor, format string, args ...any) error {
	return formatError(p.name, tensor, fmt.Sprintf(format, args...))
}

func (p *parser) left() int64 { return p.size - p.pos }

// field names a header field in errors. It is formatted only when an error
// occurs: a header of a million tensors has millions of fields.
type field struct {
	format string // with one %d (i) or %q (s) verb, or none
	s      string
	i      int64
	suffix string // " length" for a string's length
}

// String formats the field's name.
func (f field) String() string {
	switch {
	case strings.Contains(f.format, "%d") && strings.Contains(f.format, "%q"):
		return fmt.Sprintf(f.format, f.i, f.s) + f.suffix
	case strings.Contains(f.format, "%q"):
		return fmt.Sprintf(f.format, f.s) + f.suffix
	case strings.Contains(f.format, "%d"):
		return fmt.Sprintf(f.format, f.i) + f.suffix
	}
	return f.format + f.suffix
}

// named is a field without a varying part.
func named(what string) field { return field{format: what} }

// full reads exactly len(b) bytes; what names the field for the error.
func (p *parser) full(b []byte, what field) error {
	n, err := io.ReadFull(p.br, b)
	p.pos += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return p.errorf("file truncated at offset %d while reading %s", p.pos, what)
	}
	if err != nil {
		return fmt.Errorf("%s: reading %s: %w", p.name, what, err)
	}
	return nil
}

func (p *parser) u32(what field) (uint32, error) {
	if err := p.full(p.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p.buf[:4]), nil
}

func (p *parser) u64(what field) (uint64, error) {
	if err := p.full(p.buf[:8], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p.buf[:8]), nil
}

func (p *parser) str(what field) (string, error) {
	at := p.pos
	length := what
	length.suffix = " length"
	n, err := p.u64(length)
	if err != nil {
		return "", err
	}
	if n > uint64(p.left()) {
		return "", p.errorf("%s at offset %d has length %d, past the end of the file (%d bytes left)", what, at, n, p.left())
	}
	if n > maxString {
		return "", p.errorf("%s at offset %d has length %d, more than the limit of %d", what, at, n, maxString)
	}
	if n > 1<<16 {
		b := make([]byte, n)
		if err := p.full(b, what); err != nil {
			return "", err
		}
		return string(b), nil
	}
	// Short strings (names, keys, tokens) go through one reused buffer.
	if uint64(cap(p.sbuf)) < n {
		p.sbuf = make([]byte, max(n, 256))
	}
	b := p.sbuf[:n]
	if err := p.full(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

// shape returns an array of n dims cut from a shared block: a header of
// many tensors allocates a block per thousand tensors, not one per tensor.
func (p *parser) shape(n int) []int64 {
	if cap(p.dims)-len(p.dims) < n {
		p.dims = make([]int64, 0, max(4096, n))
	}
	p.dims = p.dims[:len(p.dims)+n]
	return p.dims[len(p.dims)-n : len(p.dims) : len(p.dims)]
}

// count reads an element count and checks that count elements of at least
// minSize bytes each fit in the rest of the file.
func (p *parser) count(what field, minSize int64) (int64, error) {
	at := p.pos
	n, err := p.u64(what)
	if err != nil {
		return 0, err
	}
	if minSize > 0 && n > uint64(p.left()/minSize) {
		return 0, p.errorf("%s at offset %d is %d, but only %d bytes are left", what, at, n, p.left())
	}
	return int64(n), nil
}

func (p *parser) header(g *File) error {
	var magic [4]byte
	if err := p.full(magic[:], named("magic")); err != nil {
		return err
	}
	if string(magic[:]) != Magic {
		return p.errorf("not a GGUF file (magic %q)", magic[:])
	}
	v, err := p.u32(named("version"))
	if err != nil {
		return err
	}
	switch {
	case v == 0:
		return p.errorf("bad GGUF version 0")
	case v&0xFFFF == 0:
		return p.errorf("GGUF version 0x%08x: the file has the other endianness (big-endian files are not supported)", v)
	case v == 1:
		return p.errorf("GGUF version 1 is not supported (only 2 and 3)")
	case v > 3:
		return p.errorf("GGUF version %d is not supported (only 2 and 3)", v)
	}
	g.version = int(v)

	// A tensor info takes at least 24 bytes (empty name, no dims), a KV at
	// least 13 (empty key, type, one byte of value).
	nTensors, err := p.count(named("tensor count"), 24)
	if err != nil {
		return err
	}
	nKV, err := p.count(named("metadata count"), 13)
	if err != nil {
		return err
	}
	if err := p.metadata(g, nKV); err != nil {
		return err
	}
	if err := p.alignment(g); err != nil {
		return err
	}
	if err := p.tensorInfos(g, nTensors); err != nil {
		return err
	}
	g.dataOffset = pad(p.pos, g.alignment)
	if err := p.checkData(g); err != nil {
		return err
	}
	g.warnings = p.warn
	return nil
}

func (p *parser) metadata(g *File, n int64) error {
	g.meta = make(formats.Metadata, 0, capHint(n))
	seen := make(map[string]int, capHint(n))
	for i := range n {
		key, err := p.str(field{format: "key of metadata entry %d", i: int64(i)})
		if err != nil {
			return err
		}
		if key == "" {
			return p.errorf("metadata entry %d has an empty key", i)
		}
		if j, dup := seen[key]; dup {
			return p.errorf("duplicate metadata key %q (entries %d and %d)", key, j, i)
		}
		seen[key] = int(i)
		t, err := p.u32(field{format: "value type of %q", s: key})
		if err != nil {
			return err
		}
		vt := formats.ValueType(t)
		if !validValueType(vt) {
			return p.errorf("metadata key %q has unknown value type %d", key, t)
		}
		val, err := p.value(key, vt, 0)
		if err != nil {
			return err
		}
		g.meta = append(g.meta, formats.KV{Key: key, Type: vt, Value: val})
	}
	return nil
}

func (p *parser) value(key string, t formats.ValueType, depth int) (any, error) {
	what := field{format: "value of %q", s: key}
	switch t {
	case formats.TypeString:
		return p.str(what)
	case formats.TypeArray:
		return p.array(key, depth)
	}
	sz := valueSize(t)
	if err := p.full(p.buf[:sz], what); err != nil {
		return nil, err
	}
	b := p.buf[:sz]
	if t == formats.TypeBool && b[0] > 1 {
		p.warn = append(p.warn, fmt.Sprintf("metadata key %q: bool byte %d read as true", key, b[0]))
	}
	return decodeScalar(t, b), nil
}

func decodeScalar(t formats.ValueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case formats.TypeUint8:
		return b[0]
	case formats.TypeInt8:
		return int8(b[0])
	case formats.TypeBool:
		return b[0] != 0
	case formats.TypeUint16:
		return le.Uint16(b)
	case formats.TypeInt16:
		return int16(le.Uint16(b))
	case formats.TypeUint32:
		return le.Uint32(b)
	case formats.TypeInt32:
		return int32(le.Uint32(b))
	case formats.TypeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case formats.TypeUint64:
		return le.Uint64(b)
	case formats.TypeInt64:
		return int64(le.Uint64(b))
	case formats.TypeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	return nil
}

func (p *parser) array(key string, depth int) (formats.Array, error) {
	if depth >= maxArrayDepth {
		return formats.Array{}, p.errorf("metadata key %q: arrays nested more than %d deep", key, maxArrayDepth)
	}
	et, err := p.u32(field{format: "array element type of %q", s: key})
	if err != nil {
		return formats.Array{}, err
	}
	elem := formats.ValueType(et)
	if !validValueType(elem) {
		return formats.Array{}, p.errorf("metadata key %q: array of unknown value type %d", key, et)
	}
	n, err := p.count(field{format: "array length of %q", s: key}, minValueSize(elem))
	if err != nil {
		return formats.Array{}, err
	}
	a := formats.Array{Elem: elem}
	switch elem {
	case formats.TypeString:
		// Grow by append: the bound above allows 8 bytes per string, but a
		// Go string header is 16.
		out := make([]string, 0, capHint(n))
		for i := range n {
			s, err := p.str(field{format: "element %d of %q", i: int64(i), s: key})
			if err != nil {
				return a, err
			}
			out = append(out, s)
		}
		a.Values = out
	case formats.TypeArray:
		out := make([]formats.Array, 0, capHint(n))
		for range n {
			sub, err := p.array(key, depth+1)
			if err != nil {
				return a, err
			}
			out = append(out, sub)
		}
		a.Values = out
	default:
		a.Values, err = p.fixedArray(key, elem, n)
	}
	return a, err
}

// fixedArray reads n values of a fixed-size type in chunks.
func (p *parser) fixedArray(key string, t formats.ValueType, n int64) (any, error) {
	sz := valueSize(t)
	if n*int64(sz) > maxArrayBytes {
		return nil, p.errorf("metadata key %q: array of %d %s values is larger than the limit of %d bytes", key, n, t, maxArrayBytes)
	}
	if t == formats.TypeUint8 {
		v := make([]uint8, n)
		if err := p.full(v, field{format: "array %q", s: key}); err != nil {
			return nil, err
		}
		return v, nil
	}
	var chunk [4096]byte
	per := len(chunk) / sz
	decode := func(put func(i int64, b []byte)) error {
		for i := int64(0); i < n; {
			m := min(int64(per), n-i)
			b := chunk[:m*int64(sz)]
			if err := p.full(b, field{format: "array %q", s: key}); err != nil {
				return err
			}
			for j := range m {
				put(i+j, b[j*int64(sz):(j+1)*int64(sz)])
			}
			i += m
		}
		return nil
	}
	le := binary.LittleEndian
	var out any
	var put func(i int64, b []byte)
	switch t {
	case formats.TypeInt8:
		v := make([]int8, n)
		out, put = v, func(i int64, b []byte) { v[i] = int8(b[0]) }
	case formats.TypeBool:
		v := make([]bool, n)
		out, put = v, func(i int64, b []byte) { v[i] = b[0] != 0 }
	case formats.TypeUint16:
		v := make([]uint16, n)
		out, put = v, func(i int64, b []byte) { v[i] = le.Uint16(b) }
	case formats.TypeInt16:
		v := make([]int16, n)
		out, put = v, func(i int64, b []byte) { v[i] = int16(le.Uint16(b)) }
	case formats.TypeUint32:
		v := make([]uint32, n)
		out, put = v, func(i int64, b []byte) { v[i] = le.Uint32(b) }
	case formats.TypeInt32:
		v := make([]int32, n)
		out, put = v, func(i int64, b []byte) { v[i] = int32(le.Uint32(b)) }
	case formats.TypeFloat32:
		v := make([]float32, n)
		out, put = v, func(i int64, b []byte) { v[i] = math.Float32frombits(le.Uint32(b)) }
	case formats.TypeUint64:
		v := make([]uint64, n)
		out, put = v, func(i int64, b []byte) { v[i] = le.Uint64(b) }
	case formats.TypeInt64:
		v := make([]int64, n)
		out, put = v, func(i int64, b []byte) { v[i] = int64(le.Uint64(b)) }
	case formats.TypeFloat64:
		v := make([]float64, n)
		out, put = v, func(i int64, b []byte) { v[i] = math.Float64frombits(le.Uint64(b)) }
	default:
		return nil, p.errorf("metadata key %q: array of %s", key, t)
	}
	if err := decode(put); err != nil {
		return nil, err
	}
	return out, nil
}

func (p *parser) alignment(g *File) error {
	g.alignment = DefaultAlignment
	kv, ok := g.meta.Get(AlignmentKey)
	if !ok {
		return nil
	}
	// ggml reads the key with gguf_get_val_u32 and aborts on any other type.
	v, isU32 := kv.Value.(uint32)
	if !isU32 {
		return p.errorf("%s has type %s, want u32", AlignmentKey, kv.Type)
	}
	if v == 0 || v&(v-1) != 0 {
		return p.errorf("%s = %d is not a power of two", AlignmentKey, v)
	}
	g.alignment = int64(v)
	return nil
}

func (p *parser) tensorInfos(g *File, n int64) error {
	g.tensors = make([]formats.Tensor, 0, capHint(n))
	g.byName = formats.NewNameIndex(capHint(n), func(i int) string { return g.tensors[i].Name })
	for i := range n {
		name, err := p.str(field{format: "name of tensor %d", i: i})
		if err != nil {
			return err
		}
		nd, err := p.u32(field{format: "dimension count of tensor %q", s: name})
		if err != nil {
			return err
		}
		if nd > MaxDims {
			return p.tensorErrorf(name, "%d dimensions, more than the limit of %d", nd, MaxDims)
		}
		ne := p.buf8s[:nd]
		for j := range ne {
			d, err := p.u64(field{format: "dimensions of tensor %q", s: name})
			if err != nil {
				return err
			}
			if d > math.MaxInt64 {
				return p.tensorErrorf(name, "dimension %d is negative (%d)", j, int64(d))
			}
			ne[j] = int64(d)
		}
		tid, err := p.u32(field{format: "type of tensor %q", s: name})
		if err != nil {
			return err
		}
		off, err := p.u64(field{format: "offset of tensor %q", s: name})
		if err != nil {
			return err
		}
		dt, ok := formats.FromGGML(tid)
		if !ok {
			return p.tensorErrorf(name, "unknown or removed ggml type id %d", tid)
		}
		shape := p.shape(int(nd))
		for j, d := range ne {
			shape[int(nd)-1-j] = d
		}
		if _, err := formats.Elements(shape); err != nil {
			return p.tensorErrorf(name, "%v", err)
		}
		bs := int64(dt.Info().BlockSize)
		row := int64(1)
		if nd > 0 {
			row = ne[0]
		}
		if row%bs != 0 {
			return p.tensorErrorf(name, "row of %d elements is not a multiple of the %s block size %d", row, dt, bs)
		}
		size, err := dt.Bytes(shape)
		if err != nil {
			return p.tensorErrorf(name, "%v", err)
		}
		if off > math.MaxInt64 || int64(off)%g.alignment != 0 {
			return p.tensorErrorf(name, "offset %d is not a multiple of the alignment %d", off, g.alignment)
		}
		for j := 1; j < len(ne); j++ {
			if ne[j] == 0 {
				p.warn = append(p.warn, fmt.Sprintf("tensor %q: dimension %d is zero, which crashes ggml's reader", name, j))
				break
			}
		}
		if len(g.tensors) == cap(g.tensors) {
			// Doubling: append grows large slices by a quarter, which for a
			// header of many tensors allocates five times the final list.
			g.tensors = append(make([]formats.Tensor, 0, 2*cap(g.tensors)), g.tensors...)
		}
		g.tensors = append(g.tensors, formats.Tensor{
			Name: name, Type: dt, Shape: shape, File: g.path, Offset: int64(off), Size: size,
		})
		if j := g.byName.Add(int(i)); j >= 0 {
			return p.tensorErrorf(name, "duplicate tensor name (tensors %d and %d)", j, i)
		}
	}
	return nil
}

// checkData turns relative offsets into absolute ones and checks that no
// two tensors overlap and that every tensor lies within the file: a file
// that ends inside the data is a *formats.TruncatedError, whose Header is g.
func (p *parser) checkData(g *File) error {
	avail := g.size - g.dataOffset
	limit := math.MaxInt64 - g.dataOffset // keeps absolute offsets from overflowing
	packed := true
	var run, want int64
	for i := range g.tensors {
		t := &g.tensors[i]
		rel := t.Offset
		if rel != run {
			packed = false
		}
		run = pad(rel, g.alignment) + pad(t.Size, g.alignment)
		if t.Size > 0 && (rel > limit || t.Size > limit-rel) {
			return p.tensorErrorf(t.Name, "data at relative offset %d of %d bytes ends past any possible file", rel, t.Size)
		}
		if t.Size > 0 {
			want = max(want, rel+t.Size)
		}
	}
	for i := range g.tensors {
		t := &g.tensors[i]
		rel := t.Offset
		// An empty tensor holds no data, but its offset must still be near
		// the data (within one alignment of its end, where writers put
		// them): beyond, the absolute offset could overflow to a negative.
		if t.Size == 0 && (rel > limit || rel-g.alignment > max(avail, want, 0)) {
			return p.tensorErrorf(t.Name, "empty tensor at relative offset %d, past the end of the data (%d bytes)", rel, max(avail, want, 0))
		}
		t.Offset = g.dataOffset + rel
	}
	g.packed = packed

	order := make([]int, len(g.tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return g.tensors[order[a]].Offset < g.tensors[order[b]].Offset })
	var end int64
	prev := -1
	for _, i := range order {
		t := &g.tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev >= 0 && t.Offset < end {
			return p.tensorErrorf(t.Name, "data [%d, %d) overlaps tensor %q", t.Offset, t.Offset+t.Size, g.tensors[prev].Name)
		}
		end, prev = t.Offset+t.Size, i
	}
	if prev >= 0 && g.size > pad(end, g.alignment) {
		p.warn = append(p.warn, fmt.Sprintf("%d bytes after the last tensor's data", g.size-end))
	}
	if !packed {
		p.warn = append(p.warn, "tensor data is not packed in info order (ggml's reader will refuse this file)")
	}
	if want > avail {
		return p.truncated(g, order, g.dataOffset+want)
	}
	return nil
}

// truncated returns the error for a file that ends before want, the end
// of its tensor data, listing the cut tensors in data order (order); its
// Header is g, warning first.
func (p *parser) truncated(g *File, order []int, want int64) error {
	e := &formats.TruncatedError{File: g.path, Size: g.size, Want: want, Tensors: len(g.tensors), Err: ErrFormat}
	for _, i := range order {
		t := &g.tensors[i]
		if t.Size == 0 || t.Offset+t.Size <= g.size {
			continue
		}
		if e.First == "" {
			e.First = fmt.Sprintf("data [%d, %d) runs past the end of the file", t.Offset, t.Offset+t.Size)
		}
		e.Cut = append(e.Cut, t.Name)
	}
	g.warnings = append([]string{e.Warning()}, p.warn...)
	e.Header = g
	return e
}

// Path returns the path the file was opened from.
func (f *File) Path() string { return f.path }

// Info describes the file.
func (f *File) Info() formats.Info {
	return formats.Info{
		Format:     "gguf",
		Version:    f.version,
		Alignment:  int(f.alignment),
		DataOffset: f.dataOffset,
		Files:      []string{f.path},
		Warnings:   append([]string(nil), f.warnings...),
	}
}

// Tensors lists the tensors in file order; offsets are absolute.
func (f *File) Tensors() []formats.Tensor { return f.tensors }

// Metadata returns the key-value pairs in file order.
func (f *File) Metadata() formats.Metadata { return f.meta }

// Packed reports whether the tensor data is packed in info order, each
// tensor padded to the alignment, as ggml's reader requires.
func (f *File) Packed() bool { return f.packed }

// NDims returns the dimension count stored for tensor i (sd-cli and ggml's
// writer drop trailing dims of 1, so it can be less than the model's rank).
func (f *File) NDims(i int) int { return len(f.tensors[i].Shape) }

// NE returns tensor i's dims as stored (ggml order: ne[0] is the row length).
func (f *File) NE(i int) []int64 {
	shape := f.tensors[i].Shape
	ne := make([]int64, len(shape))
	for j, d := range shape {
		ne[len(shape)-1-j] = d
	}
	return ne
}

// Size returns the file size in bytes.
func (f *File) Size() int64 { return f.size }

// ReadTensorAt reads len(p) bytes of t's data starting off bytes into the
// tensor; t must be one of f's tensors. Like io.ReaderAt, it returns io.EOF
// with a short count when the read reaches past the tensor's end.
func (f *File) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	i := -1
	if f.byName != nil {
		i = f.byName.Lookup(t.Name)
	}
	if i < 0 || f.tensors[i].Offset != t.Offset || f.tensors[i].Size != t.Size {
		return 0, fmt.Errorf("%s: tensor %q is not a tensor of this file", f.path, t.Name)
	}
	if off < 0 || off > t.Size {
		return 0, fmt.Errorf("%s: tensor %q: read offset %d outside its %d bytes", f.path, t.Name, off, t.Size)
	}
	n := min(int64(len(p)), t.Size-off)
	m, err := f.r.ReadAt(p[:n], t.Offset+off)
	if err != nil && !(errors.Is(err, io.EOF) && int64(m) == n) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return m, fmt.Errorf("%s: tensor %q: %w", f.path, t.Name, err)
	}
	if n < int64(len(p)) {
		return m, io.EOF
	}
	return m, nil
}

// Close closes the file if Open opened it.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}
