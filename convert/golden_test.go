package convert

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	_ "github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/quant/imatrix"
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
	inputs := map[string]formats.Model{}
	for flag, comp := range map[string]string{"-m": "model", "--diffusion-model": "diffusion-model", "--vae": "vae", "--clip_l": "clip_l"} {
		if v := c.flags[flag]; len(v) > 0 {
			m, err := formats.Open(filepath.Join(dir, v[0]))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			inputs[comp] = m
		}
	}
	sources, _, err := Load(inputs)
	if err != nil {
		t.Fatal(err)
	}
	var opts Options
	if v := c.flags["--type"]; len(v) > 0 {
		if opts.Type, err = ParseTargetType(v[0]); err != nil {
			t.Fatal(err)
		}
		opts.HasType = true
	}
	if v := c.flags["--tensor-type-rules"]; len(v) > 0 {
		if opts.Rules, err = ParseRules(strings.Join(v, ",")); err != nil {
			t.Fatal(err)
		}
	}
	if files := c.flags["--imat-in"]; len(files) > 0 {
		var ms []*imatrix.Matrix
		for _, f := range files {
			m, err := imatrix.OpenDat(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		if opts.Imatrix, err = imatrix.SumStored(files, ms); err != nil {
			t.Fatal(err)
		}
	}
	wanted := []formats.DType{}
	if opts.HasType {
		wanted = append(wanted, opts.Type)
	}
	for _, r := range opts.Rules {
		wanted = append(wanted, r.Type)
	}
	for _, tt := range wanted {
		if !quant.CanQuantize(tt) {
			t.Skipf("%s: no quantizer for %s in this build", c.name, tt)
		}
	}
	res, err := Build(sources, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), c.name+".gguf")
	err = pipeline.Run(context.Background(), res.Plan, pipeline.Options{
		OutPath: out, Threads: 2,
		NewWriter: func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
			return gguf.NewWriter(w, ts, nil, &gguf.WriterOptions{TrimDims: true})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
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
