//go:build !cgo

package native

// ColumnSquares panics with ErrNoCgo, the twin of colsq.go's op.
func (c *Context) ColumnSquares(xs ...Tensor) Tensor { return noCgo() }
