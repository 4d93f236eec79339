package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// flagLine matches a flag line of a help text: the names, the placeholder
// (if any) and the usage.
var flagLine = regexp.MustCompile(`^   (--?[a-zA-Z0-9_-]+)((?:, -{1,2}[a-zA-Z0-9_-]+)*)(?: ([^ ,]+))?(?:, -{1,2}[a-zA-Z0-9_-]+ [^ ]+)*  +(.*)$`)

// The help of every command, at every depth, checked for what a reader
// trips over: a default stated twice, a placeholder that is a word of the
// usage instead of a NAME, nested commands that the help does not list.
func TestHelpTexts(t *testing.T) {
	for _, path := range commandPaths(newApp(&bytes.Buffer{}, &bytes.Buffer{}).Commands, "") {
		code, out, errOut := runApp(t, append(strings.Fields(path), "--help")...)
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", path, code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("sdtool %s --help states a default twice: %q", path, line)
			}
			if m := flagLine.FindStringSubmatch(line); m != nil && m[3] != "" && strings.ToUpper(m[3]) != m[3] {
				t.Errorf("sdtool %s --help: flag %s has the placeholder %q, not an upper-case NAME: %q", path, m[1], m[3], line)
			}
		}
		app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
		cmd := findCommand(app.Commands, strings.Fields(path)[0])
		for _, name := range strings.Fields(path)[1:] {
			cmd = findCommand(cmd.Subcommands, name)
		}
		for _, sub := range cmd.Subcommands {
			if !regexp.MustCompile(`(?m)^   ` + regexp.QuoteMeta(sub.Name) + `\b`).MatchString(out) {
				t.Errorf("sdtool %s --help does not list its command %s:\n%s", path, sub.Name, out)
			}
		}
	}
}

// Every command, nested ones included, takes -v, and a flag it does not
// know is named as the user spelt it, on one line, with nothing on stdout.
func TestFlagsEverywhere(t *testing.T) {
	for _, path := range commandPaths(newApp(&bytes.Buffer{}, &bytes.Buffer{}).Commands, "") {
		args := strings.Fields(path)
		if code, _, errOut := runApp(t, append(args, "-v", "--help")...); code != 0 {
			t.Errorf("%s -v: exit %d: %s", path, code, errOut)
		}
		code, out, errOut := runApp(t, append(args, "--bogus")...)
		if code != 1 || out != "" || errOut != "sdtool: unknown flag --bogus (see --help)\n" {
			t.Errorf("%s --bogus: exit %d, stdout %q, stderr %q", path, code, out, errOut)
		}
	}
	code, out, _ := runApp(t, "imatrix", "show", "-v", "../../testdata/tiny-sd1.imatrix.dat", "--top", "1")
	if code != 0 || !strings.Contains(out, "196 entries") {
		t.Errorf("imatrix show -v: exit %d, %q", code, out)
	}
}

// --threads must be a count, --max-memory a size with or without a unit.
func TestThreadsAndMaxMemory(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--threads", "-3"}, "--threads -3: want 1 or more"},
		{[]string{"--max-memory", "2XB"}, `--max-memory: size "2XB"`},
		{[]string{"--max-memory", "0"}, "want more than 0 bytes"},
	} {
		code, _, errOut := runApp(t, append([]string{"convert", "-m", tiny, "-o", out, "--type", "q8_0"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q", c.args, code, errOut)
		}
	}
	if code, _, errOut := runApp(t, "convert", "-m", tiny, "-o", out, "--type", "q8_0", "--max-memory", "2GiB", "-t", "2"); code != 0 {
		t.Errorf("--max-memory 2GiB: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runApp(t, "diff", tiny, tiny, "--threads", "-1"); code != 1 || !strings.Contains(errOut, "--threads -1") {
		t.Errorf("diff --threads -1: exit %d, %s", code, errOut)
	}
}

// Mistyped names get the suggestion a user needs: mixes and ComfyUI types
// for type names, convert and merge pointed to quantize for what only it
// writes, and the near flag or command (issue 34, item 11).
func TestSuggestions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"quantize", tiny, "-o", out, "--type", "q4km"}, `unknown type "q4km" (did you mean Q4_K_M?)`},
		{[]string{"quantize", tiny, "-o", out, "--type", "Q4KM"}, `(did you mean Q4_K_M?)`},
		{[]string{"quantize", tiny, "-o", out, "--type", "fp8"}, `(did you mean fp8_e4m3 or fp8_e5m2?)`},
		{[]string{"convert", "-m", tiny, "-o", out, "--type", "Q4_K_M"}, "`sdtool quantize IN -o OUT.gguf --type Q4_K_M`"},
		{[]string{"convert", "-m", tiny, "-o", out, "--type", "int8_convrot"}, "`sdtool quantize IN -o OUT.safetensors --type int8_convrot`"},
		{[]string{"merge", "--method", "weighted_sum", "-a", tiny, "-b", tiny, "-o", out, "--type", "Q4_K_M"}, "a LoRA bake (--base --lora) takes it"},
		{[]string{"quantize", "--typ", "q8_0"}, "unknown flag --typ (did you mean --type or --types-from?)"},
		{[]string{"inspect", "--jsn"}, "unknown flag --jsn (did you mean --json?)"},
		{[]string{"qantize"}, `unknown command "qantize" (did you mean quantize?)`},
		{[]string{"imatrix", "shwo"}, `unknown command "imatrix shwo" (did you mean imatrix show?)`},
	} {
		code, stdout, errOut := runApp(t, c.args...)
		if code != 1 || stdout != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q, want one line with %q", c.args, code, errOut, c.want)
		}
	}
}

// Every help example writes into the scratch folder, as the README's do,
// not into the folder it runs from (issue 34, item 20). This reads the
// output flags of each example, so it also covers the examples that only
// the long run executes (generate's and report's renders).
func TestHelpExamplesWriteIntoScratch(t *testing.T) {
	for _, path := range commandPaths(newApp(&bytes.Buffer{}, &bytes.Buffer{}).Commands, "") {
		for _, ex := range helpExamples(t, path) {
			words := shellWords(ex)
			for i := 0; i+1 < len(words); i++ {
				name := strings.TrimLeft(words[i], "-")
				if name == "o" {
					name = "output"
				}
				if !strings.HasPrefix(words[i], "-") || !outputFlags[name] {
					continue
				}
				if out := words[i+1]; !strings.HasPrefix(out, scratchDir+"/") {
					t.Errorf("sdtool %s example writes %s outside %s/: %s", path, out, scratchDir, ex)
				}
			}
		}
	}
}

// shellWords splits a command line at blanks, keeping single-quoted parts
// whole (all the quoting the examples use).
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				words = append(words, cur.String())
			}
			cur.Reset()
			in = false
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
