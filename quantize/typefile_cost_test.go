package quantize

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypeFileCostBounded: a type file's cost (items times tensors) is
// bounded with clear errors, stale items get one warning line in all, and
// items WriteTypeFile anchors are found without a search (issue 35, item
// 8: 400,000 items ran past a minute at 677 MB printing 344,000 warnings).
func TestTypeFileCostBounded(t *testing.T) {
	dir := t.TempDir()
	run := func(items []string) (*Report, error) {
		t.Helper()
		f := filepath.Join(dir, "types.txt")
		if err := os.WriteFile(f, []byte(strings.Join(items, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		opts := Options{Input: tinyPath, Output: filepath.Join(dir, "o.gguf"), Type: "q8_0", TensorTypeFile: f}
		_, res, err := Plan(&opts)
		return res, err
	}
	many := make([]string, maxTypeFileItems+1)
	for i := range many {
		many[i] = fmt.Sprintf("^t%d$=q8_0", i)
	}
	if _, err := run(many); err == nil || !strings.Contains(err.Error(), "at most 65536") {
		t.Errorf("%d items: %v", len(many), err)
	}
	patterns := make([]string, maxTypeFilePatterns+1)
	for i := range patterns {
		patterns[i] = fmt.Sprintf(".*%d=q8_0", i)
	}
	if _, err := run(patterns); err == nil || !strings.Contains(err.Error(), "4097 items are patterns rather than tensor names, at most 4096") {
		t.Errorf("%d patterns: %v", len(patterns), err)
	}
	stale := []string{`^model\.diffusion_model\.out\.2\.weight$=q4_0`}
	for i := range 300 {
		stale = append(stale, fmt.Sprintf("gone%d=q8_0", i))
	}
	res, err := run(stale)
	if err != nil {
		t.Fatal(err)
	}
	var lines int
	for _, w := range res.Warnings {
		if strings.Contains(w, "no tensor") {
			lines++
			if !strings.Contains(w, "300 items match no tensor") {
				t.Errorf("warning %q does not count the stale items", w)
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d warning lines for 300 stale items, want 1: %q", lines, res.Warnings)
	}
}
