package formats

import (
	"fmt"
	"os"
	"strings"
)

// ErrTruncated is wrapped by the error for a file that ends before the
// tensor data its header lists (a cut-short download); it wraps ErrFormat.
var ErrTruncated = Sentinel("file is truncated", ErrFormat)

// TruncatedError is the error of a reader whose file is shorter than its
// header's tensor data says. Every command but inspect refuses the file
// with it; inspect shows Header, which the reader parsed whole.
type TruncatedError struct {
	// File is the path of the file.
	File string
	// Size is the file's size in bytes.
	Size int64
	// Want is the size the header's tensor data needs: the end of the
	// tensor data that ends last.
	Want int64
	// First says, in the format's words, what is wrong with the first cut
	// tensor (Cut[0]): `data [100, 900) runs past the end of the file`.
	First string
	// Cut names the tensors whose data is not all in the file, in data
	// order; Tensors is how many the header lists.
	Cut     []string
	Tensors int
	// Err is the format package's sentinel (gguf.ErrFormat, ...), as in
	// FormatError; nil for none.
	Err error
	// Header is the model as its header describes it; its Info's Warnings
	// begin with Warning(). Data of tensors not in Cut can still be read.
	// Nil once a caller that does not show it has dropped it.
	Header Model
}

// Missing returns the number of bytes the file lacks.
func (e *TruncatedError) Missing() int64 { return e.Want - e.Size }

// Error says, on one line, which file, the first cut tensor and the sizes.
func (e *TruncatedError) Error() string {
	return fmt.Sprintf("%s: tensor %q: %s: the file has %d of the %d bytes its header needs (%d missing, %s cut; a truncated download?)",
		e.File, e.Cut[0], e.First, e.Size, e.Want, e.Missing(), e.cutCount())
}

// Unwrap returns ErrTruncated and the format package's sentinel.
func (e *TruncatedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrTruncated}
	}
	return []error{ErrTruncated, e.Err}
}

// maxCutNames bounds the tensor names that Warning lists.
const maxCutNames = 5

// Warning is the line inspect shows: how many bytes are missing and which
// tensors are cut.
func (e *TruncatedError) Warning() string {
	names := make([]string, 0, maxCutNames)
	for _, n := range e.Cut[:min(len(e.Cut), maxCutNames)] {
		names = append(names, fmt.Sprintf("%q", n))
	}
	list := strings.Join(names, ", ")
	if more := len(e.Cut) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%s: truncated: %d bytes missing (the file has %d of the %d bytes its header needs); %s cut: %s",
		e.File, e.Missing(), e.Size, e.Want, e.cutCount(), list)
}

func (e *TruncatedError) cutCount() string {
	if e.Tensors == 1 {
		return "the only tensor is"
	}
	return fmt.Sprintf("%d of %d tensors", len(e.Cut), e.Tensors)
}

// detach gives e a Header that holds no open file: OpenFile closes the file
// of a model whose parse failed, so reads reopen it each time (inspect
// reads a few bytes, comfy_quant markers and adapter alphas).
func (e *TruncatedError) detach() {
	if e.Header != nil {
		e.Header = headerOnly{e.Header}
	}
}

// headerOnly is a model whose file was closed: its header answers, and
// each read opens the file again.
type headerOnly struct{ Model }

// ReadTensorAt reads from t's file, opened for this read only.
func (h headerOnly) ReadTensorAt(t *Tensor, p []byte, off int64) (int, error) {
	f, err := os.Open(t.File)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return ReadFileTensorAt(f, t.File, t, p, off)
}

// Close does nothing: no file is held open.
func (h headerOnly) Close() error { return nil }
