package formats

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// WriteOptions are the settings of a new output file. Every format reads
// the ones that apply to it and ignores the others, so that a command can
// describe its output once whatever the extension chooses.
type WriteOptions struct {
	// Name is the output's path, used in errors and as the File of the
	// writer's Layout.
	Name string
	// Metadata is written into the header: GGUF key-value pairs as typed;
	// safetensors __metadata__ entries, which must be strings.
	Metadata Metadata
	// TrimDims stores GGUF shapes without trailing dims of 1 (ggml order),
	// as sd-cli and ggml_n_dims do; false keeps every dim.
	TrimDims bool
	// PadEnd pads GGUF data after the last tensor to the alignment, as
	// ggml's gguf_write_to_file does; sd-cli writes no padding there.
	PadEnd bool
	// NoPadding leaves a safetensors header unpadded, as sd-cli writes it;
	// by default it is padded so that the data starts 8-byte aligned.
	NoPadding bool
}

// Creator is a file format that Create can write, chosen by extension.
type Creator struct {
	// Name is the format name ("gguf", "safetensors").
	Name string
	// Ext is the file extension that selects the format (".gguf").
	Ext string
	// New returns the writer of a file holding tensors (names, types and
	// shapes; sizes are computed), which writes to w.
	New func(w io.Writer, tensors []Tensor, opts WriteOptions) (TensorWriter, error)
	// Stores reports whether the format can hold tensors of type t.
	Stores func(t DType) bool
}

var (
	creatorsMu sync.Mutex
	creators   = map[string]Creator{}
)

// RegisterCreator adds a format to Create; format packages call it from init.
func RegisterCreator(c Creator) {
	creatorsMu.Lock()
	defer creatorsMu.Unlock()
	creators[strings.ToLower(c.Ext)] = c
}

// CreatorNamed returns the registered format called name.
func CreatorNamed(name string) (Creator, bool) {
	creatorsMu.Lock()
	defer creatorsMu.Unlock()
	for _, c := range creators {
		if c.Name == name {
			return c, true
		}
	}
	return Creator{}, false
}

// CreatorFor returns the format that path's extension selects
// (case-insensitively). An unknown extension is an error that wraps
// ErrFormat and lists the extensions there are. The format packages must
// be linked in (import sdtool/formats/gguf and sdtool/formats/safetensors).
func CreatorFor(path string) (Creator, error) {
	ext := strings.ToLower(filepath.Ext(path))
	creatorsMu.Lock()
	c, ok := creators[ext]
	var exts []string
	for e := range creators {
		exts = append(exts, e)
	}
	creatorsMu.Unlock()
	if ok {
		return c, nil
	}
	sort.Strings(exts)
	if ext == "" {
		return Creator{}, fmt.Errorf("%s: no file extension to choose the format by (want %s): %w", path, strings.Join(exts, " or "), ErrFormat)
	}
	return Creator{}, fmt.Errorf("%s: sdtool writes no %q files (want %s): %w", path, ext, strings.Join(exts, " or "), ErrFormat)
}
