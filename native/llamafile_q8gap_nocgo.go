//go:build !cgo

package native

// LinkedLlamafile reports false: no ggml is linked.
func LinkedLlamafile() bool { return false }
