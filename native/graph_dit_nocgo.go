//go:build !cgo

package native

// RMSNorm panics with ErrNoCgo.
func (c *Context) RMSNorm(a Tensor, eps float32) Tensor { return noCgo() }
