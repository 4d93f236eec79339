package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sdtool/sdtool/formats"
)

// WriterOptions tunes the header a Writer produces.
type WriterOptions struct {
	// Name is the output's name, used in errors and as the File of Layout's tensors.
	Name string
	// NoPadding leaves the header unpadded, as sd-cli writes it; by default
	// the header is padded with spaces so that the data starts 8-byte aligned.
	NoPadding bool
}

// Writer streams a safetensors file: the header is computed up front from the
// tensor descriptors, then the data of every tensor is written in header
// order. It implements formats.TensorWriter.
type Writer struct {
	w        io.Writer
	name     string
	header   []byte // length prefix, JSON, padding
	layout   []formats.Tensor
	dataSize int64
	written  int64 // data bytes accepted so far
	started  bool  // header written
	closed   bool
	err      error // sticky error of the underlying writer
}

var _ formats.TensorWriter = (*Writer)(nil)

// NewWriter computes the header for tensors (only Name, Type and Shape are
// used; offsets and sizes are computed) and metadata meta (written in key
// order as __metadata__, omitted when empty). Nothing is written to w until
// the first Write or Close; w may be nil when only the layout is wanted.
func NewWriter(w io.Writer, tensors []formats.Tensor, meta map[string]string, opts *WriterOptions) (*Writer, error) {
	var o WriterOptions
	if opts != nil {
		o = *opts
	}
	name := o.Name
	if name == "" {
		name = "safetensors output"
	}
	wr := &Writer{w: w, name: name}

	js, err := appendMetadata([]byte{'{'}, name, meta)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]struct{}, len(tensors))
	var off int64
	wr.layout = make([]formats.Tensor, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if err := checkName(name, t.Name, seen); err != nil {
			return nil, err
		}
		dtype, ok := t.Type.SafetensorsName()
		if !ok {
			return nil, fmt.Errorf("%s: tensor %q: type %s has no safetensors dtype", name, t.Name, t.Type)
		}
		size, err := t.Type.Bytes(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %s %v: %v", name, t.Name, dtype, t.Shape, err)
		}
		if off > (1<<62)-size {
			return nil, fmt.Errorf("%s: tensor %q: total data size overflows", name, t.Name)
		}
		if len(js) > 1 {
			js = append(js, ',')
		}
		js = appendEntry(js, t, dtype, off, size)
		wr.layout[i] = formats.Tensor{Name: t.Name, Type: t.Type, Shape: slices.Clone(t.Shape), File: o.Name, Offset: off, Size: size}
		off += size
	}
	js = append(js, '}')
	if !o.NoPadding {
		for len(js)%8 != 0 {
			js = append(js, ' ')
		}
	}
	if len(js) > MaxHeaderSize {
		return nil, fmt.Errorf("%s: header of %d bytes exceeds the limit of %d bytes", name, len(js), MaxHeaderSize)
	}
	wr.header = binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(js)), uint64(len(js)))
	wr.header = append(wr.header, js...)
	for i := range wr.layout {
		wr.layout[i].Offset += int64(len(wr.header))
	}
	wr.dataSize = off
	return wr, nil
}

// appendMetadata appends the __metadata__ entry of meta to the header js,
// keys sorted (a map has no order; sorted keys make the output
// deterministic), nothing when meta is empty.
func appendMetadata(js []byte, name string, meta map[string]string) ([]byte, error) {
	if len(meta) == 0 {
		return js, nil
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	js = appendString(js, metadataKey)
	js = append(js, ':', '{')
	for i, k := range keys {
		v := meta[k]
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("%s: metadata %q: key or value is not valid UTF-8", name, k)
		}
		if i > 0 {
			js = append(js, ',')
		}
		js = appendString(js, k)
		js = append(js, ':')
		js = appendString(js, v)
	}
	return append(js, '}'), nil
}

// checkName refuses a tensor name that readers would misread: reserved,
// not UTF-8, holding a NUL, or already in seen (which it joins).
func checkName(file, n string, seen map[string]struct{}) error {
	if n == metadataKey {
		return fmt.Errorf("%s: tensor %q: the name is reserved for metadata", file, n)
	}
	if !utf8.ValidString(n) {
		return fmt.Errorf("%s: tensor %q: name is not valid UTF-8", file, n)
	}
	if strings.IndexByte(n, 0) >= 0 {
		return fmt.Errorf("%s: tensor %q: name contains a NUL byte, which C readers take for its end", file, n)
	}
	if _, dup := seen[n]; dup {
		return fmt.Errorf("%s: tensor %q: duplicate name", file, n)
	}
	seen[n] = struct{}{}
	return nil
}

// appendEntry appends tensor t's header entry: dtype, shape and
// data_offsets [off, off+size).
func appendEntry(js []byte, t *formats.Tensor, dtype string, off, size int64) []byte {
	js = appendString(js, t.Name)
	js = append(js, `:{"dtype":`...)
	js = appendString(js, dtype)
	js = append(js, `,"shape":[`...)
	for j, d := range t.Shape {
		if j > 0 {
			js = append(js, ',')
		}
		js = strconv.AppendInt(js, d, 10)
	}
	js = append(js, `],"data_offsets":[`...)
	js = strconv.AppendInt(js, off, 10)
	js = append(js, ',')
	js = strconv.AppendInt(js, off+size, 10)
	return append(js, ']', '}')
}

// appendString appends s as a JSON string. It escapes only what JSON
// requires (quote, backslash, control characters), as Rust's serde_json does,
// rather than encoding/json's HTML-safe escapes.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// HeaderBytes returns a copy of what the writer emits before the data: the
// 8-byte length, the JSON and its padding.
func (w *Writer) HeaderBytes() []byte { return slices.Clone(w.header) }

// DataOffset returns the absolute offset at which the tensor data starts.
func (w *Writer) DataOffset() int64 { return int64(len(w.header)) }

// Layout returns the output tensors with their absolute offsets and sizes.
func (w *Writer) Layout() []formats.Tensor {
	out := slices.Clone(w.layout)
	for i := range out {
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Size returns the total number of bytes of the output.
func (w *Writer) Size() int64 { return int64(len(w.header)) + w.dataSize }

// Write appends tensor data in header order; it refuses data past the end of
// the last tensor without writing any of it.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, fmt.Errorf("%s: write after Close", w.name)
	}
	if w.err != nil {
		return 0, w.err
	}
	if left := w.dataSize - w.written; int64(len(p)) > left {
		return 0, fmt.Errorf("%s: write of %d bytes past the end of the tensor data (%d of %d bytes left)",
			w.name, len(p), left, w.dataSize)
	}
	if err := w.writeHeader(); err != nil {
		return 0, err
	}
	n, err := w.w.Write(p)
	w.written += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("%s: %w", w.name, err)
		return n, w.err
	}
	return n, nil
}

func (w *Writer) writeHeader() error {
	if w.started {
		return nil
	}
	w.started = true
	if w.w == nil {
		w.err = fmt.Errorf("%s: the writer has no output (made for its layout only)", w.name)
		return w.err
	}
	if _, err := w.w.Write(w.header); err != nil {
		w.err = fmt.Errorf("%s: writing the header: %w", w.name, err)
		return w.err
	}
	return nil
}

// Close checks that all declared data was written (writing the header if no
// data was needed); it does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if w.written < w.dataSize {
		// Name the first tensor whose data is missing.
		i := sort.Search(len(w.layout), func(i int) bool {
			t := &w.layout[i]
			return t.Offset-int64(len(w.header))+t.Size > w.written
		})
		t := &w.layout[i]
		got := max(0, w.written-(t.Offset-int64(len(w.header))))
		w.err = fmt.Errorf("%s: tensor %q: only %d of its %d bytes were written (%d of %d data bytes in all): %w",
			w.name, t.Name, got, t.Size, w.written, w.dataSize, ErrIncomplete)
		return w.err
	}
	return w.writeHeader()
}
