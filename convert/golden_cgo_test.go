//go:build cgo

package convert

// The grid IQ types (iq2_xxs, iq3_s, ...) are quantized by ggml itself in a
// cgo build, so the golden cases for them run only here.
import _ "github.com/sdtool/sdtool/native/codecs"
