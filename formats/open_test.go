package formats

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	errDir := errors.New("is a directory")
	parse := func(r io.ReaderAt, size int64, name string) (int64, error) {
		if size == 0 {
			return 0, errors.New("empty")
		}
		return size, nil
	}
	if _, _, err := OpenFile(dir, parse, func() error { return errDir }); !errors.Is(err, errDir) {
		t.Errorf("directory: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if _, f, err := OpenFile(empty, parse, func() error { return errDir }); err == nil || f != nil {
		t.Errorf("parse error not returned: %v %v", f, err)
	}
	full := filepath.Join(dir, "full")
	os.WriteFile(full, []byte("abc"), 0o644)
	n, f, err := OpenFile(full, parse, func() error { return errDir })
	if err != nil || n != 3 || f == nil {
		t.Fatalf("regular file: %d %v %v", n, f, err)
	}
	f.Close()
}
