package formats

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Tensor describes one tensor stored in a file.
type Tensor struct {
	// Name is the tensor's name as stored.
	Name string
	// Type is the element type.
	Type DType
	// Shape is in PyTorch order: outermost first, innermost (ggml ne[0]) last.
	Shape []int64
	// File is the path of the file that holds the data (differs between shards).
	File string
	// Offset is the absolute byte offset of the data in File.
	Offset int64
	// Size is the data size in bytes.
	Size int64
}

// Elements returns the number of elements of the tensor.
func (t *Tensor) Elements() int64 {
	n, _ := Elements(t.Shape)
	return n
}

// RowLength returns the number of elements in one row (the innermost dim; 1 for scalars).
func (t *Tensor) RowLength() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// Rows returns the number of rows (all elements over the row length).
func (t *Tensor) Rows() int64 {
	rl := t.RowLength()
	if rl == 0 {
		return 0
	}
	return t.Elements() / rl
}

// ValueType is a GGUF metadata value type id; safetensors metadata is all String.
type ValueType uint32

// GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

// String returns a short name of the value type ("u32", "string").
func (v ValueType) String() string {
	if int(v) < len(valueTypeNames) {
		return valueTypeNames[v]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(v))
}

// Array is a GGUF array value: Values holds a typed slice ([]uint8, []int32,
// []string, []float32, ..., or []Array for nested arrays).
type Array struct {
	// Elem is the element type.
	Elem ValueType
	// Values is a Go slice whose element type matches Elem.
	Values any
}

// Len returns the number of elements of the array.
func (a Array) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	case []Array:
		return len(v)
	}
	return 0
}

// KV is one metadata entry. Value holds the Go value matching Type: uint8,
// int8, uint16, int16, uint32, int32, float32, bool, string, uint64, int64,
// float64, or Array.
type KV struct {
	// Key is the metadata key.
	Key string
	// Type is the value type.
	Type ValueType
	// Value is the Go value matching Type.
	Value any
}

// Metadata is an ordered list of key-value pairs.
type Metadata []KV

// Get returns the entry with the given key.
func (m Metadata) Get(key string) (KV, bool) {
	for _, kv := range m {
		if kv.Key == key {
			return kv, true
		}
	}
	return KV{}, false
}

// String returns the string value of key, if it is a string.
func (m Metadata) String(key string) (string, bool) {
	kv, ok := m.Get(key)
	if !ok {
		return "", false
	}
	s, ok := kv.Value.(string)
	return s, ok
}

// Info describes a file (or a set of shards) as a whole.
type Info struct {
	// Format is "gguf" or "safetensors" (later "ckpt", "diffusers").
	Format string
	// Version is the format version (GGUF 2 or 3; 0 when the format has none).
	Version int
	// Alignment is the data alignment in bytes (GGUF), 0 when not applicable.
	Alignment int
	// DataOffset is the absolute offset of the data section of the first file.
	DataOffset int64
	// Files lists the files that make up the model, in shard order.
	Files []string
	// Warnings lists problems that do not stop reading (bytes after the last tensor, ...).
	Warnings []string
}

// Model is an opened checkpoint: tensor descriptors and metadata, with data
// read on demand.
type Model interface {
	// Path returns the path the model was opened from.
	Path() string
	// Info describes the file or shards.
	Info() Info
	// Tensors lists the tensors in file order (shard order, then file order).
	Tensors() []Tensor
	// Metadata returns the metadata in file order.
	Metadata() Metadata
	// ReadTensorAt reads len(p) bytes of t's data starting off bytes into the tensor.
	ReadTensorAt(t *Tensor, p []byte, off int64) (int, error)
	// Close releases the files.
	Close() error
}

// Find returns the tensor with the given name.
func Find(m Model, name string) (Tensor, bool) {
	for _, t := range m.Tensors() {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// ReadTensor reads all of t's data.
func ReadTensor(m Model, t *Tensor) ([]byte, error) {
	buf := make([]byte, t.Size)
	if err := readFull(m, t, buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// ReadRows reads n rows of t starting at row first into dst, which must hold
// exactly n rows.
func ReadRows(m Model, t *Tensor, first, n int64, dst []byte) error {
	rb, err := t.Type.RowBytes(t.RowLength())
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %v", t.File, t.Name, err)
	}
	if first < 0 || n < 0 || first+n > t.Rows() {
		return fmt.Errorf("%s: tensor %q: rows [%d, %d) out of range (%d rows)", t.File, t.Name, first, first+n, t.Rows())
	}
	if int64(len(dst)) != n*rb {
		return fmt.Errorf("%s: tensor %q: buffer of %d bytes for %d rows of %d bytes", t.File, t.Name, len(dst), n, rb)
	}
	return readFull(m, t, dst, first*rb)
}

func readFull(m Model, t *Tensor, p []byte, off int64) error { return ReadFull(m, t, p, off) }

// ReadFull fills p with t's data from byte offset off, looping over short
// reads; a read past the tensor's end or a premature end of file is an
// error that names the file and the tensor.
func ReadFull(m Model, t *Tensor, p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > t.Size {
		return fmt.Errorf("%s: tensor %q: read [%d, %d) past its %d bytes", t.File, t.Name, off, off+int64(len(p)), t.Size)
	}
	for len(p) > 0 {
		n, err := m.ReadTensorAt(t, p, off)
		p, off = p[n:], off+int64(n)
		if len(p) == 0 {
			return nil
		}
		if err == nil && n == 0 || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			// ReadTensorAt's errors (ReadFileTensorAt's) name the file
			// and the tensor already: say them once.
			if strings.Contains(err.Error(), "tensor "+strconv.Quote(t.Name)+": ") {
				return err
			}
			return fmt.Errorf("%s: tensor %q: %w", t.File, t.Name, err)
		}
	}
	return nil
}

// ReadFileTensorAt implements Model.ReadTensorAt for a format whose tensors
// lie at absolute offsets of one file, read through r: the tensor must be
// in path, the range inside the tensor, and the read complete.
func ReadFileTensorAt(r io.ReaderAt, path string, t *Tensor, p []byte, off int64) (int, error) {
	if t.File != path {
		return 0, fmt.Errorf("%s: tensor %q belongs to %s", path, t.Name, t.File)
	}
	if off < 0 || off > t.Size || int64(len(p)) > t.Size-off {
		return 0, fmt.Errorf("%s: tensor %q: read [%d, %d) outside its %d bytes", path, t.Name, off, off+int64(len(p)), t.Size)
	}
	n, err := r.ReadAt(p, t.Offset+off)
	if n == len(p) {
		// A ReaderAt may return io.EOF with a full read at the end of the file.
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, fmt.Errorf("%s: tensor %q: %w", path, t.Name, err)
}

// TensorWriter streams tensor data into an output whose header has already
// been computed from the tensor descriptors: data is written in header order,
// and the writer adds any padding between tensors itself.
type TensorWriter interface {
	// Write appends data of the current tensor (crossing into the next
	// tensor when the current one is complete).
	Write(p []byte) (int, error)
	// Close checks that every tensor's data was written and writes any
	// trailing padding; it does not close the underlying file.
	Close() error
	// Layout returns the output tensors with their final offsets and sizes.
	Layout() []Tensor
	// Size returns the total number of bytes the output will have.
	Size() int64
}

// TensorLayout is implemented by TensorWriters that give their Layout one
// tensor at a time, so that a caller checking a layout of many tensors
// need not copy every descriptor at once.
type TensorLayout interface {
	// NumTensors returns the number of tensors of the layout.
	NumTensors() int
	// TensorAt returns Layout()[i].
	TensorAt(i int) Tensor
}
