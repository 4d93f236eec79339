package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// cutCopy writes the first half of src into dir and returns its path, its
// size and the tensors it cuts in data order, read from the whole file.
func cutCopy(t *testing.T, src, dir string) (string, int64, []string, int64) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(data) / 2)
	path := filepath.Join(dir, "cut-"+filepath.Base(src))
	if err := os.WriteFile(path, data[:size], 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := formats.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ts := append([]formats.Tensor(nil), m.Tensors()...)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Offset < ts[j].Offset })
	var cut []string
	var want int64
	for _, tt := range ts {
		if tt.Size > 0 && tt.Offset+tt.Size > size {
			cut = append(cut, tt.Name)
		}
		want = max(want, tt.Offset+tt.Size)
	}
	return path, size, cut, want
}

// A truncated download: inspect shows its header with a warning naming the
// bytes missing and the tensors cut; convert, quantize and diff refuse it
// on one line naming the file, the first cut tensor and the sizes
// (issue 34, item 20).
func TestInspectTruncatedDownload(t *testing.T) {
	dir := t.TempDir()
	for _, src := range []string{tiny, "../../testdata/tiny-sd1.gguf"} {
		path, size, cut, want := cutCopy(t, src, dir)
		missing := fmt.Sprintf("%d bytes missing", want-size)
		code, out, errOut := runApp(t, "inspect", path)
		if code != 0 {
			t.Fatalf("inspect %s: exit %d: %s", path, code, errOut)
		}
		for _, w := range []string{"architecture:  sd1", "metadata (", cut[0], missing, fmt.Sprintf("%d of ", len(cut))} {
			if !strings.Contains(out, w) {
				t.Errorf("inspect %s does not show %q:\n%s", path, w, out)
			}
		}
		if !strings.HasPrefix(errOut, "warning: "+path+": truncated: "+missing) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("inspect %s: stderr %q, want one warning line", path, errOut)
		}
		code, out, _ = runApp(t, "inspect", "--json", path)
		var s struct {
			TensorCount int `json:"tensor_count"`
			Truncated   struct {
				Size    int64    `json:"size"`
				Missing int64    `json:"missing"`
				Cut     []string `json:"cut_tensors"`
			} `json:"truncated"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 {
			t.Fatalf("inspect --json %s: exit %d, %v", path, code, err)
		}
		if s.Truncated.Size != size || s.Truncated.Missing != want-size || strings.Join(s.Truncated.Cut, ",") != strings.Join(cut, ",") || s.TensorCount < len(cut) {
			t.Errorf("inspect --json %s: %+v, want %d missing, cut %d tensors from %s", path, s.Truncated, want-size, len(cut), cut[0])
		}

		refusals := [][]string{
			{"convert", "-m", path, "-o", filepath.Join(dir, "c.gguf"), "--type", "q8_0"},
			{"quantize", path, "-o", filepath.Join(dir, "q.gguf"), "--type", "q8_0"},
			{"diff", src, path},
		}
		for _, args := range refusals {
			code, stdout, errOut := runApp(t, args...)
			wantMsg := fmt.Sprintf("sdtool: %s: tensor %q: ", path, cut[0])
			sizes := fmt.Sprintf("the file has %d of the %d bytes", size, want)
			if code != 1 || stdout != "" || !strings.HasPrefix(errOut, wantMsg) || !strings.Contains(errOut, sizes) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%q: exit %d, stderr %q, want one line starting %q with %q", args, code, errOut, wantMsg, sizes)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the refusals wrote files: %v", entries)
	}
}
