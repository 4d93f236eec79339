package formats

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
)

// Opener is a file format that Open can detect.
type Opener struct {
	// Name is the format name ("gguf", "safetensors").
	Name string
	// Priority orders detection: lower values are tried first.
	Priority int
	// Match reports whether the file at path, whose first bytes are head,
	// is in this format.
	Match func(path string, head []byte) bool
	// Open opens the file (and any shards it belongs to).
	Open func(path string) (Model, error)
}

var (
	openersMu sync.Mutex
	openers   []Opener
)

// Register adds a format to Open's detection; format packages call it from init.
func Register(o Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	openers = append(openers, o)
	sort.SliceStable(openers, func(i, j int) bool { return openers[i].Priority < openers[j].Priority })
}

// HeadSize is the number of leading bytes given to Opener.Match.
const HeadSize = 4096

// Open detects the format of path and opens it. Shards of a split GGUF or a
// sharded safetensors checkpoint are opened together from any one of them
// (or from the index.json). The format packages must be linked in (import
// sdtool/formats/gguf and sdtool/formats/safetensors).
func Open(path string) (Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, statError(path, err)
	}
	var head []byte
	if !st.IsDir() {
		if err := CheckRegular(path, st); err != nil {
			return nil, err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		head = make([]byte, HeadSize)
		n, err := io.ReadFull(f, head)
		f.Close()
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		head = head[:n]
	}
	openersMu.Lock()
	list := append([]Opener(nil), openers...)
	openersMu.Unlock()
	for _, o := range list {
		if o.Match(path, head) {
			return o.Open(path)
		}
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s: is a directory with no recognised model layout: %w", path, ErrFormat)
	}
	return nil, fmt.Errorf("%s: not a GGUF, safetensors or PyTorch checkpoint: %w", path, ErrFormat)
}

// OpenFile opens the file at path for reading and parses it with parse
// (given the file, its size and path). A directory is refused with the
// error notFile returns. On success the caller owns the returned file and
// closes it with the model; on any failure it is already closed.
func OpenFile[T any](path string, parse func(r io.ReaderAt, size int64, name string) (T, error), notFile func() error) (T, *os.File, error) {
	var zero T
	// Stat first: opening a FIFO blocks, and a device has no end.
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		if err := CheckRegular(path, st); err != nil {
			return zero, nil, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return zero, nil, err
	}
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		err = notFile()
	}
	if err != nil {
		f.Close()
		return zero, nil, err
	}
	v, err := parse(f, st.Size(), path)
	if err != nil {
		f.Close()
		var te *TruncatedError
		if errors.As(err, &te) {
			te.detach()
		}
		return zero, nil, err
	}
	return v, f, nil
}

// CheckRegular refuses a path that is neither a regular file nor a folder
// (st is its os.Stat): a FIFO would block the reader and a device such as
// /dev/zero never ends, so neither is read as a model.
func CheckRegular(path string, st os.FileInfo) error {
	if st.IsDir() || st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
}

// statError says why path cannot be opened as the other errors do, "PATH:
// problem" ("nosuch.gguf: no such file or directory"), rather than with
// os.Stat's "stat PATH: ..." wording; the error still wraps the cause.
func statError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", path, pe.Err)
	}
	return err
}
