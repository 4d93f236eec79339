package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/quantize"
)

// TestQuantizeTypeTableDocumented checks that --help and the README show
// every row of the one type table.
func TestQuantizeTypeTableDocumented(t *testing.T) {
	code, help, errOut := runApp(t, "quantize", "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d: %s", code, errOut)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range quantize.TypeTable {
		if !strings.Contains(help, row.Name) || !strings.Contains(help, row.What) {
			t.Errorf("--help lacks type %q", row.Name)
		}
		if want := "| " + row.Name + " | " + row.Output + " | " + row.What + " |"; !strings.Contains(string(readme), want) {
			t.Errorf("README lacks the table row %q", want)
		}
	}
}

// TestQuantizeCLI runs a quantization, then the refusals, each of which
// must be one "sdtool: " line with exit status 1 and leave nothing behind.
func TestQuantizeCLI(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "q.gguf")
	code, _, errOut := runApp(t, "quantize", tiny, "-o", out, "--type", "q8_0", "--threads", "2")
	if code != 0 || !strings.Contains(errOut, "wrote "+out) || !strings.Contains(errOut, "bits per weight") {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	code, stdout, errOut := runApp(t, "quantize", tiny, "-o", filepath.Join(dir, "p.gguf"), "--type", "Q4_K_M", "--dry-run")
	if code != 0 || !strings.Contains(stdout, "TENSOR") || !strings.Contains(stdout, "closest type that fits") || !strings.Contains(stdout, "sdcpp:") {
		t.Errorf("--dry-run: exit %d, stdout %.300q, stderr %q", code, stdout, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "p.gguf")); err == nil {
		t.Error("--dry-run wrote the output")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"quantize", tiny, "-o", out, "--type", "q8_0"}, "already exists"},
		{[]string{"quantize", tiny, "-o", filepath.Join(dir, "x.safetensors"), "--type", "Q4_K_M"}, "must end in .gguf"},
		{[]string{"quantize", tiny, "-o", filepath.Join(dir, "x.gguf"), "--type", "int8"}, "must end in .safetensors"},
		{[]string{"quantize", out, "-o", filepath.Join(dir, "r.gguf"), "--type", "Q4_K_M"}, "--allow-requantize"},
		{[]string{"quantize", tiny, "-o", filepath.Join(dir, "y.gguf")}, "no --type"},
		{[]string{"quantize", "-o", filepath.Join(dir, "y.gguf"), "--type", "q8_0"}, "want one input model"},
		{[]string{"quantize", tiny, "-o", filepath.Join(dir, "y.gguf"), "--type", "tq2_0", "--target", "comfyui", "--strict"}, "--strict"},
		{[]string{"diff", tiny}, "want two models"},
		{[]string{"diff", tiny, tiny, "--filter", "("}, "--filter"},
	} {
		code, _, errOut := runApp(t, c.args...)
		if code != 1 || !strings.HasPrefix(errOut, "sdtool: ") || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q, want one line containing %q", c.args, code, errOut, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files left in the output directory: %v", names)
	}
	code, stdout, errOut = runApp(t, "diff", tiny, out, "--json", "--filter", `mlp\.fc2\.weight$`)
	if code != 0 || !strings.Contains(stdout, `"rel_error"`) || !strings.Contains(stdout, `"type_b": "q8_0"`) {
		t.Errorf("diff --json: exit %d, %.400q, %s", code, stdout, errOut)
	}
}
