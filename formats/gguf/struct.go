package gguf

import (
	"bytes"
	"io"

	"github.com/sdtool/sdtool/formats"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// DefaultAlignment is the data alignment used when general.alignment is absent.
const DefaultAlignment = 32

// AlignmentKey is the metadata key that overrides the data alignment (u32).
const AlignmentKey = "general.alignment"

// MaxDims is the largest number of dimensions the reader and writer accept;
// ggml itself accepts at most 4.
const MaxDims = 8

// GGMLMaxDims is the number of dimensions ggml's reader accepts.
const GGMLMaxDims = 4

// GGMLMaxName is one past the longest tensor name (in bytes) that a stock
// ggml build accepts.
const GGMLMaxName = 64

// Longest tensor names (in bytes) that the other GGUF readers accept.
const (
	// SDCppMaxName is stable-diffusion.cpp's limit (it builds ggml with GGML_MAX_NAME 160).
	SDCppMaxName = 159
	// ComfyGGUFMaxName is ComfyUI-GGUF's limit.
	ComfyGGUFMaxName = 127
)

// OrigShapePrefix is the metadata key prefix under which ComfyUI-GGUF
// records a tensor's torch shape (an ARRAY of INT32) when the stored shape
// differs: comfy.gguf.orig_shape.<tensor name>.
const OrigShapePrefix = "comfy.gguf.orig_shape."

// maxArrayDepth bounds the nesting of arrays of arrays, so that a crafted
// file cannot make the reader recurse without limit.
const maxArrayDepth = 16

// Errors of the reader and writer, for errors.Is.
var (
	// ErrFormat is wrapped by every *formats.FormatError about a file that
	// breaks the GGUF rules; it wraps formats.ErrFormat.
	ErrFormat = formats.Sentinel("gguf: invalid file", formats.ErrFormat)
	// ErrIncomplete is wrapped by Writer.Close when less data was written
	// than the header announced; it wraps formats.ErrIncomplete.
	ErrIncomplete = formats.Sentinel("gguf: tensor data incomplete", formats.ErrIncomplete)
)

// formatError reports a problem in a GGUF file (tensor "" for the header).
func formatError(file, tensor, msg string) error {
	return &formats.FormatError{File: file, Tensor: tensor, Msg: msg, Err: ErrFormat}
}

func init() {
	formats.Register(formats.Opener{
		Name:     "gguf",
		Priority: 10,
		Match: func(_ string, head []byte) bool {
			return bytes.HasPrefix(head, []byte(Magic))
		},
		Open: OpenModel,
	})
	formats.RegisterCreator(formats.Creator{
		Name: "gguf",
		Ext:  ".gguf",
		New: func(w io.Writer, tensors []formats.Tensor, o formats.WriteOptions) (formats.TensorWriter, error) {
			return NewWriter(w, tensors, o.Metadata, &WriterOptions{TrimDims: o.TrimDims, PadEnd: o.PadEnd})
		},
		Stores: formats.DType.IsGGML,
	})
}

// valueSize returns the encoded size of a fixed-size value type, 0 for
// strings, arrays and unknown types.
func valueSize(t formats.ValueType) int {
	switch t {
	case formats.TypeUint8, formats.TypeInt8, formats.TypeBool:
		return 1
	case formats.TypeUint16, formats.TypeInt16:
		return 2
	case formats.TypeUint32, formats.TypeInt32, formats.TypeFloat32:
		return 4
	case formats.TypeUint64, formats.TypeInt64, formats.TypeFloat64:
		return 8
	}
	return 0
}

// minValueSize is the smallest encoding of a value of type t: used to bound
// counts by the bytes left in the file before allocating anything.
func minValueSize(t formats.ValueType) int64 {
	switch t {
	case formats.TypeString:
		return 8 // length
	case formats.TypeArray:
		return 12 // element type + count
	}
	return int64(valueSize(t))
}

func validValueType(t formats.ValueType) bool { return t <= formats.TypeFloat64 }

func pad(n, align int64) int64 {
	return (n + align - 1) / align * align
}
