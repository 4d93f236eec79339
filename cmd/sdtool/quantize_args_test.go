package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// llama-quantize's positional habit, IN OUT TYPE [NTHREADS], writes what
// the flag form writes; other argument counts name the form to write.
func TestQuantizeLlamaQuantizeOrder(t *testing.T) {
	dir := t.TempDir()
	flags, positional := filepath.Join(dir, "flags.gguf"), filepath.Join(dir, "positional.gguf")
	if code, _, errOut := runApp(t, "quantize", tiny, "-o", flags, "--type", "Q8_0"); code != 0 {
		t.Fatalf("flag form: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{tiny, positional, "Q8_0"}, {tiny, positional, "Q8_0", "2", "--force"}} {
		if code, _, errOut := runApp(t, append([]string{"quantize"}, args...)...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		a, _ := os.ReadFile(flags)
		b, err := os.ReadFile(positional)
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%q wrote other bytes than -o OUT --type Q8_0 (%v)", args, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{tiny, positional}, "got 2 arguments: write sdtool quantize IN -o OUT --type TYPE"},
		{[]string{tiny, positional, "Q8_0", "many"}, `threads "many"`},
		{[]string{tiny, positional, "Q8_0", "--type", "Q4_0"}, "got 3 arguments"},
	} {
		code, _, errOut := runApp(t, append([]string{"quantize"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, %q; want one line with %q", c.args, code, errOut, c.want)
		}
	}
}
