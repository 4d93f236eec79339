//go:build !cgo

package native

// Tanh panics with ErrNoCgo, the twin of ops_zimage.go's op.
func (c *Context) Tanh(a Tensor) Tensor { return noCgo() }

// SwiGLU panics with ErrNoCgo.
func (c *Context) SwiGLU(a, b Tensor) Tensor { return noCgo() }

// Repeat panics with ErrNoCgo.
func (c *Context) Repeat(a Tensor, ne [4]int64) Tensor { return noCgo() }
