//go:build !cgo

package native

// MulMatDotF32 panics with ErrNoCgo, the twin of ops_qwen.go's op.
func (c *Context) MulMatDotF32(a, b Tensor) Tensor { return noCgo() }

// RopeNeoxFMA panics with ErrNoCgo, the twin of ops_qwen.go's op.
func (c *Context) RopeNeoxFMA(a, pos Tensor, dims int, base float32) Tensor { return noCgo() }
