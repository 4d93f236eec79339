// Command build builds sdtool with ggml's SIMD kernels, so that generate
// runs at full speed without anyone having to know the compiler flags.
//
// A plain `go build` or `go install` compiles ggml's C code without -march
// flags, which leaves its AVX2/NEON kernels out: generate is then about ten
// times slower (BENCHMARKS.md). This helper sets CGO_CFLAGS and
// CGO_CXXFLAGS for the host and runs the go command from the module root:
//
//	go run ./build               # ./sdtool for this CPU (-march=native)
//	go run ./build -release      # a portable x86-64-v3 binary (AVX2, FMA, F16C; GOAMD64=v3)
//	go run ./build -install      # go install with the same flags
//	go run ./build -n            # print the command and run nothing
//
// -ffp-contract=off keeps gcc from fusing multiply-adds in ggml's scalar
// quantizers, so quantized bytes stay identical to stable-diffusion.cpp's.
// -UGGML_USE_LLAMAFILE builds ggml's matrix products as sd-cli's ggml does
// (the Go module turns llamafile's tinyBLAS on; a -U in CGO_CFLAGS comes
// after the package's -D, so it wins): tinyBLAS sums F16 and F32 products
// in another order, and q8_0's activation blocks turn those last bits into
// a 40 dB image difference against sd-cli on the same file (BENCHMARKS.md).
// A -release binary refuses to start, with a message, on a CPU that lacks
// what it was built for, instead of crashing on an illegal instruction.
// Flags already in CGO_CFLAGS and CGO_CXXFLAGS come after these and win.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "go run ./build:", err)
		}
		os.Exit(2)
	}
}

// options are the helper's flags.
type options struct {
	out              string
	release, install bool
	dryRun           bool
}

// ccFlags returns the C and C++ flags that enable ggml's SIMD kernels on
// goos/goarch: the host's own instruction set, or a release's baseline.
func ccFlags(goos, goarch string, release bool) string {
	const common = "-ffp-contract=off -UGGML_USE_LLAMAFILE"
	switch {
	case goarch == "amd64" && release:
		return "-O3 -march=x86-64-v3 " + common
	case goarch == "amd64":
		return "-O3 -march=native " + common
	case goarch == "arm64" && goos == "linux" && !release:
		// NEON is part of arm64; -mcpu=native adds dot products, fp16 and the rest this CPU has.
		return "-O3 -mcpu=native " + common
	}
	return "-O3 " + common
}

// command returns the environment additions and go arguments that build
// (or install) sdtool as o asks, given the caller's environment getenv.
func command(o options, goos, goarch string, getenv func(string) string) (env, args []string) {
	flags := ccFlags(goos, goarch, o.release)
	for _, v := range []string{"CGO_CFLAGS", "CGO_CXXFLAGS"} {
		val := flags
		if user := strings.TrimSpace(getenv(v)); user != "" {
			val += " " + user
		}
		env = append(env, v+"="+val)
	}
	env = append(env, "CGO_ENABLED=1")
	if o.release && goarch == "amd64" {
		// Go's own code for the same baseline; its runtime refuses older CPUs too.
		env = append(env, "GOAMD64=v3")
	}
	if o.install {
		return env, []string{"install", "./cmd/sdtool"}
	}
	return env, []string{"build", "-o", o.out, "./cmd/sdtool"}
}

// moduleRoot returns the folder of the go.mod that holds this helper.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run it inside the sdtool repository (no go.mod found)")
	}
	return filepath.Dir(gomod), nil
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	exe := "sdtool"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	var o options
	fs.StringVar(&o.out, "o", exe, "output `FILE` (relative to the current folder)")
	fs.BoolVar(&o.release, "release", false, "portable release build: x86-64-v3 (AVX2, FMA, F16C) on amd64 instead of this CPU's instruction set")
	fs.BoolVar(&o.install, "install", false, "go install into GOBIN (or GOPATH/bin) instead of writing -o")
	fs.BoolVar(&o.dryRun, "n", false, "print the command and run nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see go run ./build -h)", fs.Arg(0))
	}
	if !o.install {
		abs, err := filepath.Abs(o.out)
		if err != nil {
			return err
		}
		o.out = abs
	}
	env, goArgs := command(o, runtime.GOOS, runtime.GOARCH, os.Getenv)
	line := strings.Join(append(quoteAll(env), append([]string{"go"}, goArgs...)...), " ")
	if o.dryRun {
		_, err := fmt.Fprintln(stdout, line)
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "building sdtool with ggml's SIMD kernels (the first build compiles ggml: a few minutes on 2 cores):\n  %s\n", line)
	cmd := exec.Command("go", goArgs...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", goArgs[0], err)
	}
	if o.install {
		target, err := installTarget(root, env)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "installed %s\n", target)
	} else {
		fmt.Fprintf(stderr, "built %s\n", o.out)
	}
	return nil
}

// quoteAll quotes each KEY=VALUE whose value has spaces, as a shell reads it.
func quoteAll(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.ContainsAny(v, " \t") {
			v = `"` + v + `"`
		}
		out[i] = k + "=" + v
	}
	return out
}

// installTarget returns the file that go install writes for ./cmd/sdtool
// in the module at root with the extra environment env (GOBIN, else
// GOPATH/bin), so that -install says where the binary went.
func installTarget(root string, env []string) (string, error) {
	cmd := exec.Command("go", "list", "-f", "{{.Target}}", "./cmd/sdtool")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -f {{.Target}} ./cmd/sdtool: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
