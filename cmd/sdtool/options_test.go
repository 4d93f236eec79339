package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/internal/option"
)

// engineDirs are the packages whose errors name options (option.Name).
var engineDirs = []string{"convert", "quantize", "merge", "lora", "inspect", "pipeline", "quant/mix"}

// Every option an engine error names is spelled as a flag some command
// defines, so that no message reaches the user with an engine's name.
func TestEngineOptionsAreFlags(t *testing.T) {
	flags := map[string]bool{}
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				for _, n := range f.Names() {
					flags["--"+n] = true
				}
			}
			walk(c.Subcommands)
		}
	}
	walk(newApp(io.Discard, io.Discard).Commands)
	names := engineOptionNames(t)
	if len(names) < 30 {
		t.Fatalf("found only %d option names in %v: is the walk right?", len(names), engineDirs)
	}
	for _, n := range names {
		if f := flagOf(n); !flags[f] {
			t.Errorf("option %s is spelled %s, which no command defines", n, f)
		}
	}
}

// engineOptionNames returns the string literals converted to option.Name
// in the engine packages' sources, sorted.
func engineOptionNames(t *testing.T) []option.Name {
	seen := map[option.Name]bool{}
	fset := token.NewFileSet()
	for _, dir := range engineDirs {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) != 1 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				lit, isLit := call.Args[0].(*ast.BasicLit)
				if ok && isLit && sel.Sel.Name == "Name" && fmt.Sprint(sel.X) == "option" {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						seen[option.Name(s)] = true
					}
				}
				return true
			})
		}
	}
	var out []option.Name
	for n := range seen {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// The command writes an engine error's options as flags, wrappers and all.
func TestOneLinePhrasesOptions(t *testing.T) {
	for _, c := range []struct {
		name option.Name
		want string
	}{
		{"AllowMissing", "--allow-missing"}, {"Budget.Metric", "--budget-metric"}, {"Budget.BPW", "--bpw"},
		{"DropP", "--drop-p"}, {"TensorTypes", "--tensor-type"}, {"MaxRank", "--max-rank"},
	} {
		if got := flagOf(c.name); got != c.want {
			t.Errorf("flagOf(%s) = %s, want %s", c.name, got, c.want)
		}
	}
	err := fmt.Errorf("in.gguf: %w", option.Errorf("%s and %s both set the size: use one", option.Name("Budget.Bytes"), option.Name("Budget.BPW")))
	if got, want := oneLine(err), "in.gguf: --budget and --bpw both set the size: use one"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}

// convert's engine says "no input" in its own terms; the command names
// every component flag of the input table.
func TestConvertNoInputNamesTheFlags(t *testing.T) {
	code, _, errOut := runApp(t, "convert", "-o", filepath.Join(t.TempDir(), "x.gguf"))
	if code == 0 || !strings.Contains(errOut, "no input: give at least one of -m, --diffusion-model,") || !strings.Contains(errOut, "--llm") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
