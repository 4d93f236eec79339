// Package codecs adds ggml-backed quantizers for the grid IQ types (iq1_s,
// iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s) to quant's codec registry
// when it is imported, in a cgo build; without cgo it registers nothing and
// quant.Encoder explains that these types need ggml.
//
// Import it for its side effect:
//
//	import _ "github.com/sdtool/sdtool/native/codecs"
//
// These codecs have no independent oracle: they ARE ggml's
// ggml_quantize_chunk, so their tests check only the contract around it
// (preconditions, transparency on ordinary input, no abort on extreme
// input, and round-trip error). Their Go dequantizers live in package quant
// and are checked bit for bit against ggml there.
//
// The registration lives in this package rather than in package native, so
// that native stays the ggml bindings alone and imports nothing above
// formats: quant's oracle tests import native (through native/ggmltest), and
// native importing quant would make those tests an import cycle. The rules
// that keep ggml's grid searches from aborting on extreme input
// (sanitizeGridBlock) live here too, in grid.go.
package codecs
