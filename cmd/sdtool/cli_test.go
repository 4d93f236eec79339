package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/native"
)

// TestMain lets the test binary act as sdtool itself, so that documented
// command lines run through a real process without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("SDTOOL_TEST_AS_MAIN") == "1" {
		os.Exit(run(os.Args, os.Stdout, os.Stderr))
	}
	// Reference renders go to a scratch folder, not the user's cache.
	if os.Getenv(refCacheEnv) == "" {
		dir, err := os.MkdirTemp("", "sdtool-refcache-")
		if err != nil {
			panic(err)
		}
		os.Setenv(refCacheEnv, dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func runApp(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"sdtool"}, args...), &o, &e)
	return code, o.String(), e.String()
}

func TestReorderArgs(t *testing.T) {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}},
		&cli.StringFlag{Name: "type"},
		&cli.IntFlag{Name: "seed"},
		&cli.Float64Flag{Name: "scale"},
		&cli.BoolFlag{Name: "json"},
		&cli.StringSliceFlag{Name: "filter"},
	}
	cases := []struct{ in, want []string }{
		{[]string{"IN", "-o", "OUT", "--type", "q4_K"}, []string{"-o", "OUT", "--type", "q4_K", "--", "IN"}},
		{[]string{"FILE", "--json"}, []string{"--json", "--", "FILE"}},
		{[]string{"--json"}, []string{"--json"}},
		{[]string{"A", "--seed", "-1", "B"}, []string{"--seed", "-1", "--", "A", "B"}},
		{[]string{"A", "--scale=-0.5"}, []string{"--scale=-0.5", "--", "A"}},
		{[]string{"-3", "A"}, []string{"--", "-3", "A"}},
		{[]string{"A", "--", "--json", "-o"}, []string{"--", "A", "--json", "-o"}},
		{[]string{"A", "--filter", "a{1,2},b", "--filter", "-x"}, []string{"--filter", "a{1,2},b", "--filter", "-x", "--", "A"}},
		{[]string{"A", "-o"}, []string{"-o"}}, // a missing value is left for the parser to report
		{[]string{"A", "-", "--unknown", "B"}, []string{"--unknown", "--", "A", "-", "B"}},
	}
	for _, c := range cases {
		if got := reorderArgs(flags, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("reorderArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestNormalizeArgs(t *testing.T) {
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	cases := []struct{ in, want []string }{
		{[]string{"sdtool", "inspect", "F", "--json"}, []string{"sdtool", "inspect", "--json", "--", "F"}},
		{[]string{"sdtool", "-v", "inspect", "F", "-v"}, []string{"sdtool", "-v", "inspect", "-v", "--", "F"}},
		{[]string{"sdtool", "help", "inspect"}, []string{"sdtool", "help", "inspect"}},
		{[]string{"sdtool", "--version"}, []string{"sdtool", "--version"}},
		{[]string{"sdtool"}, []string{"sdtool"}},
	}
	for _, c := range cases {
		if got := normalizeArgs(app, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("normalizeArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

const tiny = "../../testdata/tiny-sd1.safetensors"

func TestFlagsAfterArgumentsAndCommas(t *testing.T) {
	// A regex with a comma must reach the filter whole, and the flags after
	// the file must be parsed.
	code, out, errOut := runApp(t, "inspect", tiny, "--filter", `^model\.diffusion_model\.out\.[0-9]{1,2}\.weight$`, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var s struct {
		Filter  []string `json:"filter"`
		Tensors []struct {
			Name string `json:"name"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("--json output does not parse: %v", err)
	}
	if len(s.Filter) != 1 || !strings.Contains(s.Filter[0], "{1,2}") {
		t.Errorf("filter split or lost: %q", s.Filter)
	}
	if len(s.Tensors) != 2 {
		t.Errorf("%d tensors match, want out.0.weight and out.2.weight: %v", len(s.Tensors), s.Tensors)
	}
}

func TestJSONSeveralFilesIsArray(t *testing.T) {
	code, out, errOut := runApp(t, "inspect", "--json", "--no-tensors", tiny, tiny)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Fatalf("want an array of 2 objects: %v", err)
	}
	if list[0]["architecture"].(map[string]any)["name"] != "sd1" {
		t.Errorf("architecture = %v", list[0]["architecture"])
	}
	if n := len(list[0]["tensors"].([]any)); n != 0 {
		t.Errorf("--no-tensors still lists %d tensors", n)
	}
}

func TestErrorsAreOneLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(bad, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"), 0o644)
	for _, args := range [][]string{
		{"inspect", filepath.Join(dir, "missing.gguf")},
		{"inspect", bad},
		{"inspect"},
		{"inspect", tiny, "--filter", "("},
		{"inspect", "--bogus", tiny},
		{"inspect", tiny, "--filter"},
		{"nosuchcommand"},
	} {
		code, _, errOut := runApp(t, args...)
		if code != 1 {
			t.Errorf("%q: exit %d, want 1", args, code)
		}
		if !strings.HasPrefix(errOut, "sdtool: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: stderr %q is not one \"sdtool: \" line", args, errOut)
		}
	}
}

func TestVersionAndVerbose(t *testing.T) {
	code, out, _ := runApp(t, "--version")
	if code != 0 || !strings.Contains(out, "sdtool version") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	// -v is verbose, not version: with it inspect still runs and logs at debug level.
	code, out, errOut := runApp(t, "inspect", tiny, "--no-tensors", "-v")
	if code != 0 || !strings.Contains(out, "architecture:") || !strings.Contains(errOut, "level=DEBUG") {
		t.Errorf("-v: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runApp(t, "-v", "inspect", tiny, "--no-tensors")
	if code != 0 || !strings.Contains(errOut, "level=DEBUG") {
		t.Errorf("global -v: exit %d, stderr %q", code, errOut)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {}, {"help", "inspect"}, {"inspect", "--help"}, {"inspect", "-h"}} {
		code, out, errOut := runApp(t, args...)
		if code != 0 || !strings.Contains(out, "USAGE:") {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, errOut, out)
		}
	}
	_, out, _ := runApp(t, "help")
	if !strings.Contains(out, "--version") || strings.Contains(out, "--version, -v") {
		t.Errorf("the version flag must be --version only:\n%s", out)
	}
}

// helpExamples returns the example command lines of a subcommand's --help
// (path: "inspect", or "imatrix show" for a nested one).
func helpExamples(t *testing.T, path string) []string {
	code, out, errOut := runApp(t, append(strings.Fields(path), "--help")...)
	if code != 0 {
		t.Fatalf("%s --help: exit %d: %s", path, code, errOut)
	}
	_, after, ok := strings.Cut(out, "\n"+examplesHeader+"\n")
	if !ok {
		return nil
	}
	var ex []string
	for _, line := range strings.Split(after, "\n") {
		if e, ok := strings.CutPrefix(line, "   $ "); ok {
			ex = append(ex, e)
		}
	}
	return ex
}

// readmeCommands returns the command lines of README.md's code blocks
// (lines joined at trailing backslashes, comments and "$ " prompts removed).
func readmeCommands(t *testing.T) []string {
	var cmds []string
	for _, block := range readmeBlocks(t) {
		cmds = append(cmds, block...)
	}
	return cmds
}

// readmeBlocks returns the command lines of each code block of README.md
// (continuation lines joined, comments and "$ " prompts removed).
func readmeBlocks(t *testing.T) [][]string {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	in := false
	pending := ""
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			if in && len(cur) > 0 {
				blocks = append(blocks, cur)
			}
			in, cur = !in, nil
			continue
		}
		if !in {
			continue
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "$ ")
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			pending += s
			continue
		}
		cur = append(cur, pending+line)
		pending = ""
	}
	return blocks
}

// goToolchain matches command lines that run the Go toolchain itself
// (tests, vet, builds): .ci/run runs those; running them here would recurse.
var goToolchain = regexp.MustCompile(`^([A-Z_]+=("[^"]*"|\S*) +)*go +(test|vet|build|install|generate|mod)\b`)

// scratchDir is the folder README.md's examples write into (git ignores it).
const scratchDir = "out"

func TestReadmeStartsWithRunAndTest(t *testing.T) {
	cmds := readmeCommands(t)
	// The scratch folder is made first: outputs need their folder.
	if len(cmds) > 0 && cmds[0] == "mkdir -p "+scratchDir {
		cmds = cmds[1:]
	}
	if len(cmds) < 2 || !strings.HasPrefix(cmds[0], "go run ./cmd/sdtool ") || cmds[1] != "go test ./..." {
		t.Fatalf("README must start with a go run ./cmd/sdtool command and then go test ./...; has %q", cmds[:min(2, len(cmds))])
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cmds[1]) + `$`).Match(ci) {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", cmds[1])
	}
}

// TestDocumentedCommands runs every command line of the README and every
// example of every subcommand's help, exactly as written, through bash
// with sdtool (and "go run ./cmd/sdtool") standing for this binary, in a
// scratch copy of testdata. README lines run in order, then again (a
// conversion must be repeatable); each subcommand's examples run in order
// in a fresh copy. Lines that run the Go toolchain itself are left to .ci/run.
// The renders are most of its time, so the default run renders the README's
// first SD 1.x block once and leaves to the long run (SDTOOL_LONG=1) the
// second pass of every block that renders, the SDXL, Flux, Chroma, SD3, report and
// calibration blocks (longReadmeBlock) and the generate and report help
// examples.
func TestDocumentedCommands(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	wrapper := "#!/bin/sh\nSDTOOL_TEST_AS_MAIN=1 exec " + shellQuote(exe) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "sdtool"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	// "go run [flags] ./cmd/sdtool ARGS" becomes "sdtool ARGS", and
	// "go run ./build" (the SIMD build helper) puts this binary at ./sdtool,
	// as the helper would build it there; any other use of go in a
	// documented line is a mistake in this test's scope.
	prelude := `go() {
  if [ "$1" = run ]; then
    shift
    while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
    case "$1" in
      ./cmd/sdtool|github.com/sdtool/sdtool/cmd/sdtool) shift; sdtool "$@"; return;;
      ./build) shift; [ $# -eq 0 ] || { echo "go run ./build $*: only the plain form is supported here" >&2; return 99; }
        cp "$(command -v sdtool)" ./sdtool; return;;
    esac
  fi
  echo "documented line runs go $*: not supported by this test" >&2; return 99
}
`
	runLines := func(t *testing.T, lines []string, setup ...string) string {
		dir := t.TempDir()
		copyDir(t, "../../testdata", filepath.Join(dir, "testdata"))
		lines = append(setup, lines...)
		for _, line := range lines {
			cmd := exec.Command(bash, "-c", prelude+line)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v\n%s", line, err, out)
			}
		}
		return dir
	}

	var readme, again []string
	for _, block := range readmeBlocks(t) {
		text := strings.Join(block, "\n")
		renders := needsGGML.MatchString(text)
		if !native.Available && renders {
			// Later lines of a block may use what a generate line wrote.
			t.Logf("needs a cgo build: %q", block)
			continue
		}
		if renders && longReadmeBlock.MatchString(text) && !longtest.Enabled() {
			t.Logf("a long case (SDTOOL_LONG=1 runs it): %q", block)
			continue
		}
		for _, c := range block {
			if goToolchain.MatchString(c) {
				t.Logf("left to .ci/run: %s", c)
				continue
			}
			if atDefaults(c) && !longtest.Enabled() {
				t.Logf("a long case (SDTOOL_LONG=1 runs it): %s", c)
				continue
			}
			readme = append(readme, c)
			if !renders || longtest.Enabled() {
				again = append(again, c)
			}
		}
	}
	if len(readme) == 0 {
		t.Fatal("no runnable command lines in README.md")
	}
	t.Run("README", func(t *testing.T) {
		t.Parallel()
		dir := runLines(t, append(readme, again...))
		checkScratchOnly(t, dir, "README examples")
	})

	for _, path := range commandPaths(newApp(&bytes.Buffer{}, &bytes.Buffer{}).Commands, "") {
		ex := helpExamples(t, path)
		if len(ex) == 0 {
			t.Errorf("sdtool %s --help shows no examples", path)
			continue
		}
		for _, e := range ex {
			if !strings.HasPrefix(e, "sdtool "+path+" ") {
				t.Errorf("sdtool %s example %q does not start with \"sdtool %s \"", path, e, path)
			}
		}
		if !native.Available && needsGGML.MatchString("sdtool "+path) {
			t.Logf("sdtool %s examples need a cgo build", path)
			continue
		}
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			if needsGGML.MatchString("sdtool " + path) {
				// The README's renders above stand for them in the default run.
				longtest.Skip(t, "sdtool "+path+" --help examples (renders)")
			}
			// The README makes the scratch folder once, before its first
			// example; a help's examples assume it, as they would run
			// after the README's.
			dir := runLines(t, ex, "mkdir -p "+scratchDir)
			checkScratchOnly(t, dir, "sdtool "+path+" --help examples")
		})
	}
}

// checkScratchOnly fails t when the examples run in dir (what names them)
// wrote anything but into the scratch folder: nothing in the repository
// root (but the ./sdtool that go run ./build makes, which git ignores),
// nothing in testdata/ (issue 34, item 20).
func checkScratchOnly(t *testing.T, dir, what string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n := e.Name(); n != scratchDir && n != "testdata" && n != "sdtool" {
			t.Errorf("%s wrote %s outside %s/", what, n, scratchDir)
		}
	}
	if got, want := listFiles(t, filepath.Join(dir, "testdata")), listFiles(t, "../../testdata"); !reflect.DeepEqual(got, want) {
		t.Errorf("%s changed testdata/: %q, was %q", what, got, want)
	}
}

// commandPaths lists every command below cmds as its path ("inspect",
// "imatrix", "imatrix show", ...), leaving out urfave's help commands.
func commandPaths(cmds []*cli.Command, prefix string) []string {
	var out []string
	for _, c := range cmds {
		if c.Name == "help" {
			continue
		}
		out = append(out, prefix+c.Name)
		out = append(out, commandPaths(c.Subcommands, prefix+c.Name+" ")...)
	}
	return out
}

// longReadmeBlock matches the README blocks that render SDXL, Flux, Chroma,
// SD3, Wan, Qwen-Image, Z-Image, a report or a calibration set: the default
// run leaves them to the long one (TestGenerateEmptyPrompt,
// TestGenerateVideo, TestReportNaNFile and infer's TestTiny*Generates
// render those by default).
var longReadmeBlock = regexp.MustCompile(`tiny-sdxl|tiny-flux|tiny-chroma|tiny-sd3|tiny-wan|tiny-qwen-image|tiny-z-image|sdtool report\b|--prompt-file`)

// atDefaults reports whether a documented line renders at a model's own
// size and step count (a generate line without --steps): the README's
// first render of the tiny model costs as much as its 64x64 renders
// together, so the default run leaves it to the long one. No later line
// may read what such a line writes.
func atDefaults(line string) bool {
	return needsGGML.MatchString(line) && !strings.Contains(line, "--steps")
}

// needsGGML matches documented command lines that run models through ggml,
// which a CGO_ENABLED=0 build cannot (it says so and exits 1).
var needsGGML = regexp.MustCompile(`(^|\s)(\./)?(sdtool|\./cmd/sdtool) (generate|report)\b`)

// listFiles returns the files under dir, relative to it, sorted.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The README says what the first build costs and what gcc prints during
// it, so that a newcomer does not think it is stuck or broken.
func TestReadmeSaysWhatTheFirstBuildCosts(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(string(data)), " ")
	for _, want := range []string{"expect 4 to 9 minutes", "-Wstringop-overflow", "the build succeeds"} {
		if !strings.Contains(s, want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
	if strings.Contains(s, "takes about a minute") {
		t.Error("README.md still says the first build takes about a minute")
	}
}

// A ladder that requantizes says so once, in the one warning format, not
// once per rung as a log line (issue 34, item 9).
func TestLadderWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runApp(t, "quantize", "../../testdata/tiny-flux.gguf", "--type", "Q8_0,Q4_K_M,int8_convrot", "--allow-requantize",
		"-o", filepath.Join(dir, "f-{type}.{ext}"), "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := strings.Count(errOut, "warning: requantizing 23 quantized tensors"); n != 1 || strings.Contains(errOut, "level=") {
		t.Errorf("the requantize warning %d times, or a log line:\n%s", n, errOut)
	}
}
