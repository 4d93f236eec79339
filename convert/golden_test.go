package convert

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/quant"
)

// goldenDir is shared/data/sdcli-golden beside the repository.
func goldenDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "shared", "data", "sdcli-golden")
	if _, err := os.Stat(filepath.Join(dir, "cases.txt")); err != nil {
		t.Skipf("sd-cli golden outputs absent (%s)", dir)
	}
	return dir
}

// goldenCase is one line of cases.txt: the sd-cli flags that made NAME.gguf.
type goldenCase struct {
	name  string
	flags map[string][]string
}

func readCases(t *testing.T, dir string) []goldenCase {
	raw, err := os.ReadFile(filepath.Join(dir, "cases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []goldenCase
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		name, cmd, _ := strings.Cut(line, ": ")
		args := strings.Fields(cmd)[3:] // drop "sd-cli -M convert"
		c := goldenCase{name: name, flags: map[string][]string{}}
		for i := 0; i+1 < len(args); i += 2 {
			c.flags[args[i]] = append(c.flags[args[i]], args[i+1])
		}
		out = append(out, c)
	}
	return out
}

// convertLikeSDCLI runs the conversion the way `sdtool convert` does for
// the given sd-cli flags and returns the output bytes.
func convertLikeSDCLI(t *testing.T, dir string, c goldenCase) []byte {
	t.Helper()
	cfg := &Config{Inputs: map[string]string{}, Output: filepath.Join(t.TempDir(), c.name+".gguf"), Threads: 2}
	for flag, comp := range map[string]string{"-m": "model", "--diffusion-model": "diffusion-model", "--vae": "vae", "--clip_l": "clip_l"} {
		if v := c.flags[flag]; len(v) > 0 {
			cfg.Inputs[comp] = filepath.Join(dir, v[0])
		}
	}
	if v := c.flags["--type"]; len(v) > 0 {
		cfg.Type = v[0]
	}
	cfg.Rules = strings.Join(c.flags["--tensor-type-rules"], ",")
	for _, f := range c.flags["--imat-in"] {
		cfg.Imatrix = append(cfg.Imatrix, filepath.Join(dir, f))
	}
	if _, err := Run(context.Background(), cfg); err != nil {
		if errors.Is(err, quant.ErrNoCodec) {
			t.Skipf("%s: %v", c.name, err)
		}
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.Output)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenSDCLI(t *testing.T) {
	dir := goldenDir(t)
	for _, c := range readCases(t, dir) {
		t.Run(c.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, c.name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			got := convertLikeSDCLI(t, dir, c)
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes, sd-cli wrote %d; first difference at %d", c.name, len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
