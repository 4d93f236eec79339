//go:build !cgo

package native

// Copy panics with ErrNoCgo, the twin of ops_wanvae.go's op.
func (c *Context) Copy(a, b Tensor) Tensor { return noCgo() }
