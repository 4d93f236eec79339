// Package gguf reads and writes GGUF files (versions 2 and 3), the container
// of ggml, llama.cpp, stable-diffusion.cpp and ComfyUI-GGUF.
//
// The reader validates the whole header (types, block sizes, alignment,
// offsets, data within the file) with buffered sequential reads, so that the
// header of a multi-gigabyte file is parsed in milliseconds; tensor data is
// read on demand. It is more lenient than ggml in two documented ways: it
// accepts tensors with up to MaxDims dimensions and data that is aligned and
// non-overlapping but not packed in info order (see File.Packed). Split GGUF
// files (NAME-00001-of-00003.gguf) are opened together by OpenModel.
//
// The writer computes the whole header from the tensor descriptors first and
// then streams the tensor data in order, adding the padding itself.
package gguf

import (
	"bytes"
	"errors"

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

// maxArrayDepth bounds the nesting of arrays of arrays, so that a crafted
// file cannot make the reader recurse without limit.
const maxArrayDepth = 16

// ErrFormat is returned (wrapped) for files that are not valid GGUF.
var ErrFormat = errors.New("gguf: invalid file")

func init() {
	formats.Register(formats.Opener{
		Name:     "gguf",
		Priority: 10,
		Match: func(_ string, head []byte) bool {
			return bytes.HasPrefix(head, []byte(Magic))
		},
		Open: OpenModel,
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
