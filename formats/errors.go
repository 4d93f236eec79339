package formats

import (
	"errors"
	"fmt"
)

// Errors shared by every format package, for errors.Is. Each format package
// declares its own prefixed sentinels (gguf.ErrFormat, ...) that wrap these.
var (
	// ErrFormat is wrapped by every error about a file that is in no
	// supported format or breaks its format's rules.
	ErrFormat = errors.New("invalid or unsupported file format")
	// ErrIncomplete is wrapped when a TensorWriter is closed before it got
	// every byte its header announced.
	ErrIncomplete = errors.New("tensor data incomplete")
)

// FormatError is a problem found in one file, located as precisely as the
// reader knows: "model.gguf: tensor "x.weight": data runs past the end".
// Every format package reports malformed input with it.
type FormatError struct {
	// File is the path of the file (a shard, a folder's index).
	File string
	// Tensor names the tensor concerned, "" for the header and metadata.
	Tensor string
	// Msg says what is wrong.
	Msg string
	// Err is the format package's sentinel (gguf.ErrFormat, ...), which
	// wraps ErrFormat; nil stands for ErrFormat itself.
	Err error
}

// Error formats the problem as "FILE: tensor "NAME": MSG", or "FILE: MSG"
// when no tensor is concerned.
func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("%s: tensor %q: %s", e.File, e.Tensor, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap returns the format package's sentinel, or ErrFormat.
func (e *FormatError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrFormat
}

// sentinel is an error value with its own message that wraps another.
type sentinel struct {
	msg    string
	parent error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.parent }

// Sentinel returns a new error value whose message is msg and which wraps
// parent (ErrFormat, ErrIncomplete), so that a format package can declare
// prefixed sentinels ("gguf: invalid file") that callers may test against
// either the package's value or the shared one.
func Sentinel(msg string, parent error) error { return &sentinel{msg: msg, parent: parent} }
