package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/quantize"
)

// writeJSONOut is the part of docs/write-json.md these tests read.
type writeJSONOut struct {
	Command   string `json:"command"`
	Output    string `json:"output"`
	Format    string `json:"format"`
	DryRun    bool   `json:"dry_run"`
	FileBytes int64  `json:"file_bytes"`
	Bytes     int64  `json:"bytes"`
	Tensors   []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"tensors"`
	Notes     []string          `json:"notes"`
	Consumers []json.RawMessage `json:"consumers"`
}

// checkAgainstFile compares what --json said with the file written: its
// size and every tensor's name and type, in order.
func checkAgainstFile(t *testing.T, what string, got writeJSONOut, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got.FileBytes != st.Size() || got.Output != path {
		t.Errorf("%s: file_bytes %d for %s, the file %s has %d", what, got.FileBytes, got.Output, path, st.Size())
	}
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ts := m.Tensors()
	if len(ts) != len(got.Tensors) {
		t.Fatalf("%s: %d tensors in the JSON, %d in the file", what, len(got.Tensors), len(ts))
	}
	for i, tt := range ts {
		if got.Tensors[i].Name != tt.Name || got.Tensors[i].Type != tt.Type.String() {
			t.Errorf("%s: tensor %d is %s %s in the JSON, %s %s in the file", what, i, got.Tensors[i].Type, got.Tensors[i].Name, tt.Type, tt.Name)
			break
		}
	}
}

// runJSON runs sdtool with args and decodes its stdout into v, failing
// the test when a field of it is not in the tables of doc or it holds null.
func runJSON(t *testing.T, doc string, v any, args ...string) {
	t.Helper()
	code, stdout, errOut := runApp(t, args...)
	if code != 0 {
		t.Fatalf("%q: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("%q: %v in %q", args, err, stdout)
	}
	checkDocumented(t, doc, stdout, false)
}

// checkDocumented fails the test for every field of the JSON text js that
// is not named in a table row of the document doc (under docs/), and for
// a null unless nulls are allowed.
func checkDocumented(t *testing.T, doc, js string, nulls bool) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("../../docs", doc))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| ([^|]+)\\|").FindAllStringSubmatch(string(text), -1) {
		for _, f := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(m[1], -1) {
			documented[f[1]] = true
		}
	}
	dec := json.NewDecoder(strings.NewReader(js))
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var walk func(any)
		walk = func(x any) {
			switch x := x.(type) {
			case map[string]any:
				for k, e := range x {
					if !documented[k] {
						t.Errorf("JSON field %q is not documented in docs/%s", k, doc)
					}
					if e == nil && !nulls {
						t.Errorf("JSON field %q is null", k)
					}
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(v)
	}
}

// convert, quantize and merge print with --json what they plan and write:
// the dry run's file_bytes is the size of the file the run then writes,
// and the tensors listed are the file's, with their types (issue 34,
// item 17).
func TestWriteCommandsJSON(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		out  string
		args []string
	}{
		{"convert", "c.gguf", []string{"convert", "-m", tiny, "--type", "q4_0"}},
		{"quantize", "q.gguf", []string{"quantize", tiny, "--type", "Q4_K_M"}},
		{"quantize", "i8.safetensors", []string{"quantize", tiny, "--type", "int8_convrot", "--convrot-group-size", "16"}},
		{"merge", "m.gguf", []string{"merge", "--method", "weighted_sum", "-a", tiny, "-b", tiny, "--type", "q8_0"}},
	} {
		path := filepath.Join(dir, c.out)
		var dry, run writeJSONOut
		runJSON(t, "write-json.md", &dry, append(c.args, "-o", path, "--json", "--dry-run")...)
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%s: --dry-run --json wrote %s", c.out, path)
		}
		runJSON(t, "write-json.md", &run, append(c.args, "-o", path, "--json")...)
		if dry.Command != c.name || !dry.DryRun || run.DryRun || dry.FileBytes != run.FileBytes || dry.Bytes != run.Bytes || run.Notes == nil {
			t.Errorf("%s: dry run %+v, run %+v", c.out, dry, run)
		}
		checkAgainstFile(t, c.out+" (dry run)", dry, path)
		checkAgainstFile(t, c.out, run, path)
		if c.name == "quantize" && len(run.Consumers) == 0 {
			t.Errorf("%s: no consumers", c.out)
		}
	}
}

// A ladder's --json lists every rung as quantize's --json gives one file,
// and the manifest's path.
func TestLadderJSON(t *testing.T) {
	dir := t.TempDir()
	var l struct {
		DryRun   bool           `json:"dry_run"`
		Manifest string         `json:"manifest"`
		Files    []writeJSONOut `json:"files"`
	}
	runJSON(t, "write-json.md", &l, "quantize", tiny, "--type", "Q8_0,int8_convrot", "--convrot-group-size", "16", "-o", filepath.Join(dir, "t-{type}.{ext}"), "--json")
	if l.DryRun || l.Manifest != filepath.Join(dir, quantize.ManifestName) || len(l.Files) != 2 {
		t.Fatalf("ladder JSON %+v", l)
	}
	checkAgainstFile(t, "Q8_0 rung", l.Files[0], filepath.Join(dir, "t-Q8_0.gguf"))
	checkAgainstFile(t, "int8_convrot rung", l.Files[1], filepath.Join(dir, "t-int8_convrot.safetensors"))
}
