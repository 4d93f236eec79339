package formats

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// A missing input is named as every other error names its file, without
// os.Stat's "stat" prefix, and still tells a caller that it does not exist.
func TestOpenMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nosuch.gguf")
	_, err := Open(path)
	if err == nil || err.Error() != path+": no such file or directory" || strings.HasPrefix(err.Error(), "stat ") {
		t.Errorf("Open of a missing file: %v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v does not wrap fs.ErrNotExist", err)
	}
}
