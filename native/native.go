package native

import (
	"errors"
	"fmt"
)

// What the cgo build and its twin share: the errors of the graph API and its limits.

// ErrNoCgo is returned (or wrapped) by every call that needs ggml in a binary
// built without cgo, where Available is false.
var ErrNoCgo = errors.New("ggml is not linked: this binary was built without cgo")

// ErrAborted is returned by Backend.Compute when Backend.Abort stopped the
// graph between two of its nodes.
var ErrAborted = errors.New("ggml: computation aborted")

// ErrContextFull is returned when a context has no room for another descriptor.
var ErrContextFull = errors.New("ggml: context has no room for more tensors")

// MaxColumnSquares is the most activations one ColumnSquares op measures
// (ggml takes fewer than GGML_MAX_SRC, 10, sources per op).
const MaxColumnSquares = 9

// ShapeError is the panic value of an op whose operands do not fit; graph
// builders recover it (Recover) into an ordinary error.
type ShapeError struct{ Msg string }

// Error returns the message with a "ggml: " prefix.
func (e *ShapeError) Error() string { return "ggml: " + e.Msg }

func shapeErr(format string, args ...any) {
	panic(&ShapeError{fmt.Sprintf(format, args...)})
}

// Recover turns a panic from an op (ErrContextFull, a *ShapeError, or
// ErrNoCgo from the twin without cgo) into *err; other panics continue. Use
// it as `defer native.Recover(&err)`.
func Recover(err *error) {
	r := recover()
	if r == nil {
		return
	}
	switch v := r.(type) {
	case *ShapeError:
		*err = v
	case error:
		if errors.Is(v, ErrContextFull) || errors.Is(v, ErrNoCgo) {
			*err = v
			return
		}
		panic(r)
	default:
		panic(r)
	}
}
