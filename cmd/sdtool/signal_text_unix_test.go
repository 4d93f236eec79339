//go:build unix && cgo

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A real SIGTERM while generate encodes a long prompt and negative prompt
// (8 KiB each, a hundred CLIP passes): the process stops at the next graph
// node with exit status 1 and one line saying so, and leaves no image and
// no .partial. The signal is sent when -v logs the loaded model, just
// before the text encoders run.
func TestGenerateSIGTERMWhileEncoding(t *testing.T) {
	dir := t.TempDir()
	words := strings.Fields(strings.Repeat("a photo of a red house by the sea ", 1000))
	prompt := strings.Join(words, " ")[:8000]
	out := filepath.Join(dir, "x.png")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-v", "generate", "-m", tinyGGUF, "-p", prompt, "-n", prompt, "--steps", "1",
		"-W", "64", "-H", "64", "-t", "1", "-o", out)
	cmd.Env = append(os.Environ(), "SDTOOL_TEST_AS_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	sc := bufio.NewScanner(stderr)
	sc.Buffer(nil, 1<<20)
	var sent time.Time
	for sc.Scan() {
		fmt.Fprintln(&all, sc.Text())
		if sent.IsZero() && strings.Contains(sc.Text(), "msg=model ") {
			cmd.Process.Signal(syscall.SIGTERM)
			sent = time.Now()
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("generate did not stop after SIGTERM")
	}
	if sent.IsZero() {
		t.Fatalf("no model line to signal on: %s", all.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1 (not death by the signal)", err)
	}
	lines := strings.Split(strings.TrimSpace(all.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "sdtool: generate: interrupted (received SIGTERM) while encoding the prompt") {
		t.Errorf("last line %q, want it to say the prompt's encoding was interrupted by SIGTERM", last)
	}
	for _, f := range []string{out, out + ".partial"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was left", f)
		}
	}
}

// holdLoadEnv makes the test binary, run as sdtool, hold generate just
// before it loads the model, saying so on stderr, until a signal comes (or
// ten seconds pass).
const holdLoadEnv = "SDTOOL_TEST_HOLD_LOAD"

func init() {
	if os.Getenv(holdLoadEnv) != "" {
		testHookBeforeLoad = func(ctx context.Context) {
			fmt.Fprintln(os.Stderr, "test: loading held")
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
}

// A SIGTERM while generate loads the model: exit status 1 with one line
// saying so, not death by the signal, and nothing written.
func TestGenerateSIGTERMWhileLoading(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.png")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "generate", "-m", tinyGGUF, "-p", "a cat", "--steps", "1", "-W", "64", "-H", "64", "-t", "1", "-o", out)
	cmd.Env = append(os.Environ(), "SDTOOL_TEST_AS_MAIN=1", holdLoadEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		fmt.Fprintln(&all, sc.Text())
		if sc.Text() == "test: loading held" {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1 (not death by the signal): %s", err, all.String())
	}
	want := "sdtool: generate: interrupted (received SIGTERM) while loading the model; nothing was written"
	if got := strings.TrimSpace(all.String()); !strings.HasSuffix(got, want) {
		t.Errorf("stderr %q, want it to end with %q", got, want)
	}
	for _, f := range []string{out, out + ".partial"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was left", f)
		}
	}
}
