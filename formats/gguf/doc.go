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
//
// The package is one room of the formats/ floor (see docs/design.md): struct.go
// holds the definitions the reader and writer share, reader.go and
// writer.go mirror each other, split.go joins shards. It imports only
// package formats, registers itself with formats.Open and formats.Create,
// and knows nothing of models or commands.
package gguf
