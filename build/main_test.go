package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	none := func(string) string { return "" }
	cases := []struct {
		name          string
		o             options
		goos, goarch  string
		getenv        func(string) string
		wantEnv, want string
	}{
		{"this amd64 CPU", options{out: "/r/sdtool"}, "linux", "amd64", none,
			`CGO_CFLAGS=-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_CXXFLAGS=-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_ENABLED=1`, "build -o /r/sdtool ./cmd/sdtool"},
		{"amd64 release", options{out: "x", release: true}, "linux", "amd64", none,
			`CGO_CFLAGS=-O3 -march=x86-64-v3 -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_CXXFLAGS=-O3 -march=x86-64-v3 -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_ENABLED=1|GOAMD64=v3`, "build -o x ./cmd/sdtool"},
		{"install on linux/arm64", options{install: true}, "linux", "arm64", none,
			`CGO_CFLAGS=-O3 -mcpu=native -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_CXXFLAGS=-O3 -mcpu=native -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_ENABLED=1`, "install ./cmd/sdtool"},
		{"darwin/arm64 (NEON is baseline)", options{out: "x"}, "darwin", "arm64", none,
			`CGO_CFLAGS=-O3 -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_CXXFLAGS=-O3 -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_ENABLED=1`, "build -o x ./cmd/sdtool"},
		{"the user's flags come last and win", options{out: "x"}, "linux", "amd64",
			func(k string) string {
				if k == "CGO_CFLAGS" {
					return "-DGGML_MAX_NAME=160"
				}
				return ""
			},
			`CGO_CFLAGS=-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE -DGGML_MAX_NAME=160|CGO_CXXFLAGS=-O3 -march=native -ffp-contract=off -UGGML_USE_LLAMAFILE|CGO_ENABLED=1`, "build -o x ./cmd/sdtool"},
	}
	for _, c := range cases {
		env, args := command(c.o, c.goos, c.goarch, c.getenv)
		if got := strings.Join(env, "|"); got != c.wantEnv {
			t.Errorf("%s: env\n%s\nwant\n%s", c.name, got, c.wantEnv)
		}
		if got := strings.Join(args, " "); got != c.want {
			t.Errorf("%s: go %s, want go %s", c.name, got, c.want)
		}
	}
}

// -n prints one shell line that runs the build as written.
func TestDryRun(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"-n", "-release"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(out.String())
	if strings.Count(line, "\n") != 0 || !strings.Contains(line, "go build -o ") || !strings.Contains(line, `CGO_CFLAGS="-O3 `) {
		t.Errorf("dry run printed %q", out.String())
	}
	if err := run([]string{"extra"}, &out, &errOut); err == nil {
		t.Error("a stray argument was accepted")
	}
}

// -install says where the binary went: GOBIN when set.
func TestInstallTarget(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	gobin := t.TempDir()
	got, err := installTarget(root, []string{"GOBIN=" + gobin, "CGO_ENABLED=1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(gobin, "sdtool"); strings.TrimSuffix(got, ".exe") != want {
		t.Errorf("install target %q, want %q", got, want)
	}
}
