//go:build !cgo

package native

// QuantizeActivations panics with ErrNoCgo, the twin of w8a8.go's op.
func (c *Context) QuantizeActivations(x Tensor, group int) Tensor { return noCgo() }

// QuantizeActivationsLevels panics with ErrNoCgo, the twin of w8a8.go's op.
func (c *Context) QuantizeActivationsLevels(x Tensor, group, levels int) Tensor { return noCgo() }

// MulMatI8 panics with ErrNoCgo, the twin of w8a8.go's op.
func (c *Context) MulMatI8(w, xq, scale, bias Tensor) Tensor { return noCgo() }

// Contiguous reports false: there are no tensors without cgo.
func (t Tensor) Contiguous() bool { return false }

// Data returns ErrNoCgo.
func (t Tensor) Data() ([]byte, error) { return nil, ErrNoCgo }

// W8A8Kernel returns "none": there is no kernel without cgo.
func W8A8Kernel() string { return "none" }

// UseW8A8Kernel returns ErrNoCgo.
func UseW8A8Kernel(name string) error { return ErrNoCgo }
