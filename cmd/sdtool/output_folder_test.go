package main

import (
	"strings"
	"testing"
)

// -o naming a folder is said as such, with a file name to use, instead of
// blaming the missing extension; a missing input is named without "stat".
func TestOutputFolderAndMissingInput(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"quantize", tiny, "-o", dir, "--type", "q8_0"},
		{"convert", "-m", tiny, "-o", dir, "--type", "q8_0"},
		{"merge", "--base", tiny, "--lora", "../../testdata/tiny-sd1-lora.safetensors", "-o", dir},
	} {
		code, _, errOut := runApp(t, args...)
		if code != 1 || !strings.Contains(errOut, dir+" is a folder: name the output file, such as "+dir+"/model.") {
			t.Errorf("%s -o FOLDER: exit %d, %q", args[0], code, errOut)
		}
	}
	code, _, errOut := runApp(t, "inspect", "nosuch.gguf")
	if code != 1 || errOut != "sdtool: nosuch.gguf: no such file or directory\n" {
		t.Errorf("inspect nosuch.gguf: exit %d, %q", code, errOut)
	}
}

// imatrix show --filter picks entries (--top is columns per entry), in the
// table and in the JSON.
func TestImatrixShowFilter(t *testing.T) {
	const dat = "../../testdata/tiny-sd1.imatrix.dat"
	code, out, errOut := runApp(t, "imatrix", "show", dat, "--top", "1", "--filter", `attn2\.to_k`, "--filter", `mlp\.fc1`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], "196 entries") || !strings.Contains(lines[0], "shown (--filter)") {
		t.Errorf("header %q", lines[0])
	}
	for _, l := range lines[2:] {
		if !strings.Contains(l, "attn2.to_k") && !strings.Contains(l, "mlp.fc1") {
			t.Errorf("--filter let through %q", l)
		}
	}
	if len(lines) < 4 || len(lines) >= 2+196 {
		t.Errorf("%d entries shown", len(lines)-2)
	}
	code, js, _ := runApp(t, "imatrix", "show", dat, "--json", "--filter", `attn2\.to_k`)
	if code != 0 || strings.Count(js, `"name"`) != strings.Count(out, "attn2.to_k") || !strings.Contains(js, `"entry_count": 196`) {
		t.Errorf("--json --filter: exit %d, %d entries", code, strings.Count(js, `"name"`))
	}
	if code, _, errOut := runApp(t, "imatrix", "show", dat, "--filter", "("); code != 1 || !strings.Contains(errOut, `--filter "("`) {
		t.Errorf("bad --filter: exit %d, %q", code, errOut)
	}
}
