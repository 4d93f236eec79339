//go:build !cgo

package native

// LinkedX86 lists nothing: no ggml is linked.
func LinkedX86() []string { return nil }
