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
