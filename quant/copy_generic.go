//go:build !amd64 || purego

package quant

// copyBytes is copy.
func copyBytes(dst, src []byte) { copy(dst, src) }
