//go:build !cgo

package native

// Available reports whether ggml is linked into this binary.
const Available = false
