// Package ggmltest exposes ggml's own answers for tests to compare sdtool's
// Go code with: its quantizers and dequantizers (QuantizeChunk, Dequantize,
// DequantizeQ8K), its float conversions, its type table (TypeName,
// BlockLayout) and its GGUF reader (ReadGGUF). None of it is used by sdtool
// itself; ReadGGUF in particular decodes values with code of its own,
// sharing nothing with formats/gguf, so that it stays an independent oracle.
//
// It needs cgo, like package native, which links ggml; tests that import it
// carry the cgo build tag. Without cgo the package is empty.
package ggmltest
