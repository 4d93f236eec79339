package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
)

// FolderOutput returns an error when the output path names an existing
// folder (`-o out`), saying to name a file in it, such as out/model.EXT;
// nil otherwise. Writers check it before the extension, whose absence a
// folder would otherwise be blamed for.
func FolderOutput(path, ext string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a folder: name the output file, such as %s", path, filepath.Join(path, "model."+ext))
	}
	return nil
}
