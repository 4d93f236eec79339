package formats

import (
	"fmt"
	"io"
	"os"
)

// Bounds on the side files the commands read whole (type files, recipes,
// manifests, prompt files, tokenizers): each is far above any real file of
// its kind and far below the memory a hostile one could otherwise take.
const (
	// MaxTextFile bounds a side file of text or JSON: type files,
	// recipes, rules, ladder manifests and prompt files.
	MaxTextFile = 64 << 20
	// MaxTokenizerFile bounds a tokenizer file (tokenizer.json,
	// spiece.model, merges.txt); the largest real ones are about 35 MB.
	MaxTokenizerFile = 256 << 20
)

// OpenRegular opens path for reading when it is a regular file (links
// followed) of at most limit bytes, and returns the file and its size. A
// FIFO, socket or device is refused before it is opened, and the open
// itself does not block (O_NONBLOCK where the system has it), so that a
// FIFO swapped in meanwhile is refused by the second check instead of
// hanging the command; /dev/zero and other endless files never count as
// data.
func OpenRegular(path string, limit int64) (*os.File, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if err := checkSide(path, st, limit); err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|oNonBlock, 0)
	if err != nil {
		return nil, 0, err
	}
	if st, err = f.Stat(); err == nil {
		err = checkSide(path, st, limit)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// ReadRegular reads the whole of path, a regular file of at most limit
// bytes (see OpenRegular); a file that grows past limit while it is read
// is refused too.
func ReadRegular(path string, limit int64) ([]byte, error) {
	f, size, err := OpenRegular(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, size+1)
	b, err = readAllLimit(f, b, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// readAllLimit appends r's bytes to b, failing once they pass limit.
func readAllLimit(r io.Reader, b []byte, limit int64) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, fmt.Errorf("larger than %d bytes", limit)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// checkSide refuses a side file that is not a regular file or is larger
// than limit.
func checkSide(path string, st os.FileInfo, limit int64) error {
	if st.IsDir() {
		return fmt.Errorf("%s: is a directory, not a file", path)
	}
	if err := CheckRegular(path, st); err != nil {
		return err
	}
	if st.Size() > limit {
		return fmt.Errorf("%s: %d bytes, more than the %d this kind of file may have", path, st.Size(), limit)
	}
	return nil
}
