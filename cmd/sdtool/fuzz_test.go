package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// FuzzReorderArgs checks reorderArgs on arbitrary argument lists: it never
// panics, keeps every argument (only "--" markers move), keeps the
// positional arguments in order, and is idempotent.
func FuzzReorderArgs(f *testing.F) {
	for _, s := range []string{
		"IN\x00-o\x00OUT\x00--type\x00q4_K",
		"FILE\x00--json\x00--filter\x00a{1,2}",
		"A\x00--\x00--json\x00-o",
		"--seed\x00-1\x00-2\x00--scale=-0.5",
		"-o",
		"-\x00--\x00--",
	} {
		f.Add(s)
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}},
		&cli.StringFlag{Name: "type"},
		&cli.IntFlag{Name: "seed"},
		&cli.Float64Flag{Name: "scale"},
		&cli.BoolFlag{Name: "json"},
		&cli.StringSliceFlag{Name: "filter"},
		cli.HelpFlag,
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := strings.Split(s, "\x00")
		out := reorderArgs(flags, in)
		if again := reorderArgs(flags, out); !reflect.DeepEqual(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		strip := func(a []string) []string {
			var r []string
			for _, x := range a {
				if x != "--" {
					r = append(r, x)
				}
			}
			slices.Sort(r)
			return r
		}
		if dangling(flags, out) {
			// A value flag with its value missing ends the output, for the parser to report.
			if in[len(in)-1] != out[len(out)-1] {
				t.Fatalf("dangling flag %q is not the input's last argument: %q", out[len(out)-1], in)
			}
			return
		}
		if !reflect.DeepEqual(strip(in), strip(out)) {
			t.Fatalf("arguments changed: %q -> %q", in, out)
		}
		// Positionals come after the first "--" of the output, in input order.
		if i := slices.Index(out, "--"); i >= 0 {
			for _, a := range out[:i] {
				if !isFlag(a) && !isValueOfPrev(flags, out[:i], a) {
					t.Fatalf("positional %q before the flags end: %q -> %q", a, in, out)
				}
			}
		}
	})
}

// isValueOfPrev reports whether a appears in fl right after a flag that takes a value.
func isValueOfPrev(flags []cli.Flag, fl []string, a string) bool {
	for i := 1; i < len(fl); i++ {
		if fl[i] == a && isFlag(fl[i-1]) && takesValue(flags, fl[i-1]) && !strings.Contains(fl[i-1], "=") {
			return true
		}
	}
	return false
}

// dangling reports whether args end with a value flag that has no value.
func dangling(flags []cli.Flag, args []string) bool {
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return false
		}
		if isFlag(args[i]) && takesValue(flags, args[i]) && !strings.Contains(args[i], "=") {
			if i+1 == len(args) {
				return true
			}
			i++
		}
	}
	return false
}
