package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

const goldenDir = "../../../shared/data/sdcli-golden"

func goldenFiles(t *testing.T) []string {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.gguf"))
	if len(files) == 0 {
		t.Skip("no sd-cli golden files in " + goldenDir)
	}
	return files
}

// TestSdcliLayout re-writes every sd-cli output through NewWriter with the
// same descriptors, TrimDims and no end padding, and expects the same bytes.
func TestSdcliLayout(t *testing.T) {
	for _, path := range goldenFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			info := f.Info()
			if info.Version != 3 || len(f.Metadata()) != 0 || info.Alignment != 32 || !f.Packed() || len(info.Warnings) != 0 {
				t.Errorf("not sd-cli's layout: %+v, %d KVs, packed %v", info, len(f.Metadata()), f.Packed())
			}
			var descs []formats.Tensor
			for i, tt := range f.Tensors() {
				// sd-cli stores ggml_n_dims: no trailing ne of 1 unless n_dims is 1.
				if ne := f.NE(i); len(ne) > 1 && ne[len(ne)-1] == 1 {
					t.Errorf("%s: stored ne %v has a trailing 1", tt.Name, ne)
				}
				descs = append(descs, formats.Tensor{Name: tt.Name, Type: tt.Type, Shape: tt.Shape})
			}
			var out bytes.Buffer
			w, err := NewWriter(&out, descs, f.Metadata(), &WriterOptions{TrimDims: true})
			if err != nil {
				t.Fatal(err)
			}
			if w.Size() != int64(len(orig)) {
				t.Errorf("writer size %d, file %d", w.Size(), len(orig))
			}
			for _, tt := range f.Tensors() {
				data, err := formats.ReadTensor(f, &tt)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write(data); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), orig) {
				n := 0
				for n < min(out.Len(), len(orig)) && out.Bytes()[n] == orig[n] {
					n++
				}
				t.Errorf("re-written file differs from sd-cli's at byte %d (sizes %d and %d)", n, out.Len(), len(orig))
			}
		})
	}
}
