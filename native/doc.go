// Package native links ggml (through the ollama module's cgo build of ggml's
// base and CPU backend) and exposes the parts of its C API that sdtool needs:
// quantizers as an oracle and as codecs for the grid IQ types, the GGUF
// reader, and later the inference kernels. It is the only package that
// imports "C"; without cgo it is empty and Available reports false.
package native
