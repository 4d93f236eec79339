//go:build !cgo

package native

// Rope panics with ErrNoCgo, the twin of ops_llm.go's op.
func (c *Context) Rope(a, pos Tensor, dims, mode int, base float32) Tensor { return noCgo() }

// RopeMulti panics with ErrNoCgo, the twin of ops_llm.go's op.
func (c *Context) RopeMulti(a, pos Tensor, dims int, sections [4]int, base float32) Tensor {
	return noCgo()
}
