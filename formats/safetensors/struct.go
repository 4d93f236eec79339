package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/sdtool/sdtool/formats"
)

// MaxHeaderSize is the largest header length accepted, as in the Hugging Face reader.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved top-level key that holds string metadata.
const metadataKey = "__metadata__"

// Errors of the reader and writer, for errors.Is.
var (
	// ErrFormat is wrapped by every *formats.FormatError about a file that
	// breaks the safetensors rules; it wraps formats.ErrFormat.
	ErrFormat = formats.Sentinel("safetensors: invalid file", formats.ErrFormat)
	// ErrIncomplete is wrapped by Writer.Close when less data was written
	// than the header declares; it wraps formats.ErrIncomplete.
	ErrIncomplete = formats.Sentinel("safetensors: tensor data incomplete", formats.ErrIncomplete)
)

// formatError reports a violation of the safetensors format found in one
// file (tensor "" when no tensor is concerned).
func formatError(file, tensor, msg string) error {
	return &formats.FormatError{File: file, Tensor: tensor, Msg: msg, Err: ErrFormat}
}

func init() {
	formats.Register(formats.Opener{
		Name: "safetensors",
		// After GGUF (10): a GGUF magic never reads as a plausible header length.
		Priority: 20,
		Match: func(path string, head []byte) bool {
			return IsIndex(path) || LooksLikeHeader(head)
		},
		Open: OpenModel,
	})
	formats.RegisterCreator(formats.Creator{
		Name: "safetensors",
		Ext:  ".safetensors",
		New: func(w io.Writer, tensors []formats.Tensor, o formats.WriteOptions) (formats.TensorWriter, error) {
			meta, err := stringMetadata(o.Name, o.Metadata)
			if err != nil {
				return nil, err
			}
			return NewWriter(w, tensors, meta, &WriterOptions{Name: o.Name, NoPadding: o.NoPadding})
		},
		Stores: func(t formats.DType) bool {
			_, ok := t.SafetensorsName()
			return ok
		},
	})
}

// stringMetadata turns metadata into the __metadata__ map, which holds
// strings only: arrays become their ArrayText.
func stringMetadata(file string, meta formats.Metadata) (map[string]string, error) {
	if meta == nil {
		return nil, nil
	}
	out := make(map[string]string, len(meta))
	for _, kv := range meta {
		s, ok := kv.Value.(string)
		if a, isArr := kv.Value.(formats.Array); isArr {
			var err error
			if s, err = ArrayText(a); err != nil {
				return nil, fmt.Errorf("%s: metadata %q: %v", file, kv.Key, err)
			}
			ok = true
		}
		if !ok {
			return nil, fmt.Errorf("%s: metadata %q is %s, and safetensors metadata holds strings only", file, kv.Key, kv.Type)
		}
		out[kv.Key] = s
	}
	return out, nil
}

// LooksLikeHeader reports whether head starts like a safetensors file: an
// 8-byte little-endian header length within the limit, then '{' after
// optional whitespace.
func LooksLikeHeader(head []byte) bool {
	if len(head) < 9 {
		return false
	}
	n := binary.LittleEndian.Uint64(head)
	if n < 2 || n > MaxHeaderSize {
		return false
	}
	for _, c := range head[8:min(len(head), 8+int(n))] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}
