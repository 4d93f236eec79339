package safetensors

import (
	"encoding/binary"

	"github.com/sdtool/sdtool/formats"
)

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
