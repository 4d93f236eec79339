package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/pipeline"
)

// TestQuantizeBudgetCLI makes a budgeted dry run, which writes nothing,
// then the run, which writes its recipe both ways, replays the rules text
// with --tensor-type-rules, and checks the refusals, each one "sdtool: "
// line with exit status 1.
func TestQuantizeBudgetCLI(t *testing.T) {
	dir := t.TempDir()
	rules, types := filepath.Join(dir, "r.txt"), filepath.Join(dir, "t.txt")
	args := []string{"quantize", tiny, "-o", filepath.Join(dir, "b.gguf"), "--budget", "3MB", "--write-rules", rules, "--write-type-file", types, "-t", "2"}
	code, stdout, errOut := runApp(t, append(args, "--dry-run")...)
	if code != 0 || !strings.Contains(stdout, "budget: 2.86 MiB (3000000 bytes); predicted file") || !strings.Contains(stdout, "budget (predicted relative error") {
		t.Fatalf("budget dry run: exit %d, stderr %s, stdout tail %q", code, errOut, stdout[max(0, len(stdout)-600):])
	}
	// A dry run writes nothing, the recipe files included (issue 34, item 18).
	for _, p := range []string{filepath.Join(dir, "b.gguf"), rules, types} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("--dry-run wrote %s", p)
		}
	}
	if !strings.Contains(errOut, rules+" not written (--dry-run") || !strings.Contains(errOut, types+" not written (--dry-run") {
		t.Errorf("stderr %q does not say the recipe files were not written", errOut)
	}
	// The run writes them after the model, and its summary gives the size
	// the budget predicted, in the same words (issue 34, item 10).
	code, _, errOut = runApp(t, args...)
	if code != 0 || !strings.Contains(errOut, "wrote "+rules) || !strings.Contains(errOut, "wrote "+types) {
		t.Fatalf("budget run: exit %d, stderr %q", code, errOut)
	}
	st, err := os.Stat(filepath.Join(dir, "b.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	size := fmt.Sprintf("file %s (%d bytes)", pipeline.HumanBytes(st.Size()), st.Size())
	if !strings.Contains(errOut, size) || !strings.Contains(stdout, "predicted "+size) {
		t.Errorf("the run's summary %q or the budget line does not say %q", errOut, size)
	}
	r, _ := os.ReadFile(rules)
	tf, _ := os.ReadFile(types)
	if strings.Count(string(tf), "\n") != strings.Count(string(r), "=") || len(tf) == 0 {
		t.Errorf("%d type-file lines for %d rules", strings.Count(string(tf), "\n"), strings.Count(string(r), "="))
	}
	code, again, errOut := runApp(t, "quantize", tiny, "-o", filepath.Join(dir, "c.gguf"), "--type", "q8_0", "--tensor-type-rules", strings.TrimSpace(string(r)), "--dry-run")
	if code != 0 {
		t.Fatalf("replaying the rules: exit %d: %s", code, errOut)
	}
	// The per-type totals of the two plans are the same.
	totals := func(s string) string {
		_, rest, _ := strings.Cut(s, "parameters: ")
		head, _, _ := strings.Cut(rest, "type: ")
		return head
	}
	if totals(again) != totals(stdout) {
		t.Errorf("replayed rules give\n%s\nthe budget gave\n%s", totals(again), totals(stdout))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--budget", "1KB"}, "below the smallest file"},
		{[]string{"--budget", "3MB", "--type", "q4_K"}, "leave out --type"},
		{[]string{"--bpw", "0"}, "--bpw 0: want more than 0"},
		{[]string{"--budget", "3MB", "--budget-types", "q4_K,zz"}, "--budget-types"},
		{[]string{"--type", "q8_0", "--budget-types", "q4_K"}, "--budget-types applies to --budget"},
		{[]string{"--budget", "3MB", "--write-rules", rules}, "already exists"},
		{[]string{"--type", "q8_0", "--types-from", tinySDXL}, "tensor names differ"},
		{[]string{"--type", "q8_0", "--tensor-type-file", filepath.Join(dir, "none.txt")}, "none.txt"},
	} {
		args := append([]string{"quantize", tiny, "-o", filepath.Join(dir, "x.gguf"), "--dry-run"}, c.args...)
		code, _, errOut := runApp(t, args...)
		if code != 1 || !strings.HasPrefix(errOut, "sdtool: ") || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q, want one line containing %q", c.args, code, errOut, c.want)
		}
	}
}
