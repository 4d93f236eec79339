package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

func TestMergeErrorsAreOneLine(t *testing.T) {
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.json")
	os.WriteFile(recipe, []byte(`{"sources": [{"path": "x", "include": [], "bogus": 1}]}`), 0o644)
	out := filepath.Join(dir, "o.safetensors")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"merge"}, "give --recipe RECIPE.json or --method METHOD"},
		{[]string{"merge", "--recipe", recipe, "--method", "ties", "-o", out}, "exclude each other"},
		{[]string{"merge", "--recipe", recipe, "-a", tiny, "-o", out}, "-a is for arithmetic merges"},
		{[]string{"merge", "--recipe", recipe, "-o", out}, "r.json: sources[0].include: empty"},
		{[]string{"merge", "--method", "weighted_sum", "-a", tiny, "-o", out}, "needs -a A and -b B"},
		{[]string{"merge", "--method", "avg", "-a", tiny, "-b", tiny, "-o", out}, `unknown merge method "avg"`},
		{[]string{"merge", "--method", "slerp", "-a", tiny, "-b", tiny, "-o", tiny}, "refusing to write over input"},
		{[]string{"merge", "stray", "--method", "slerp"}, "unexpected arguments"},
	}
	for _, c := range cases {
		code, _, errOut := runApp(t, c.args...)
		if code != 1 || !strings.HasPrefix(errOut, "sdtool: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q, want one line with %q", c.args, code, errOut, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%q: wrote %s", c.args, out)
		}
	}
	// The recipe's second problem is reported on the same line.
	_, _, errOut := runApp(t, "merge", "--recipe", recipe, "-o", out)
	if !strings.Contains(errOut, "sources[0].bogus: unknown field") {
		t.Errorf("stderr %q lacks the unknown field", errOut)
	}
}

func TestMergeCommand(t *testing.T) {
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.json")
	abs, _ := filepath.Abs(tiny)
	os.WriteFile(recipe, []byte(`{"sources": [{"path": "`+abs+`", "include": ["^first_stage_model\\."], "strip_prefix": "first_stage_model."}]}`), 0o644)
	out := filepath.Join(dir, "vae.safetensors")
	code, stdout, errOut := runApp(t, "merge", "--recipe", recipe, "-o", out, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "decoder.conv_in.weight") || !strings.Contains(stdout, "first_stage_model.decoder.conv_in.weight") {
		t.Fatalf("dry run: exit %d, %s\n%s", code, errOut, stdout)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("--dry-run wrote the output")
	}
	src, err := formats.Open(tiny)
	if err != nil {
		t.Fatal(err)
	}
	vae := 0
	for _, ts := range src.Tensors() {
		if strings.HasPrefix(ts.Name, "first_stage_model.") {
			vae++
		}
	}
	src.Close()
	if code, _, errOut := runApp(t, "merge", "--recipe", recipe, "-o", out); code != 0 || !strings.Contains(errOut, fmt.Sprintf("wrote %s: file ", out)) || !strings.Contains(errOut, fmt.Sprintf("bytes); %d tensors", vae)) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if code, _, errOut := runApp(t, "merge", "--recipe", recipe, "-o", out); code != 1 || !strings.Contains(errOut, "--force") {
		t.Errorf("existing output: exit %d: %s", code, errOut)
	}
	// Flags after the method's arguments, --type as an alias of --dtype.
	q := filepath.Join(dir, "q.gguf")
	code, _, errOut = runApp(t, "merge", "--method", "ties", "-a", tiny, "-b", tiny, "-o", q, "--type", "q8_0", "--density", "0.5", "-t", "1")
	if code != 0 {
		t.Fatalf("ties: exit %d: %s", code, errOut)
	}
	code, stdout, _ = runApp(t, "inspect", q, "--filter", `conv_in\.weight$`)
	if code != 0 || !strings.Contains(stdout, "sdtool.merge = method=ties") {
		t.Errorf("inspect of the merge: %s", stdout)
	}
}
