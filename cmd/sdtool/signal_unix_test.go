//go:build unix && cgo

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/quant/imatrix"
)

// A real SIGINT in the middle of a calibration run: the images already
// made stay, the run says on one line that it was interrupted and where,
// and the importance matrix collected so far is written and readable.
func TestGenerateSIGINTWritesCollectedImatrix(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.txt")
	os.WriteFile(prompts, []byte(strings.Repeat("a cat\na red house\n", 20)), 0o644)
	dat := filepath.Join(dir, "calib.dat")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "generate", "-m", tinyGGUF, "--prompt-file", prompts, "--steps", "2", "-W", "64", "-H", "64",
		"-t", "1", "-o", filepath.Join(dir, "x.png"), "--imatrix-out", dat)
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
	signalled := false
	for sc.Scan() {
		fmt.Fprintln(&all, sc.Text())
		if !signalled && strings.HasPrefix(sc.Text(), "wrote ") {
			cmd.Process.Signal(syscall.SIGINT)
			signalled = true
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("generate did not stop after SIGINT")
	}
	if !signalled {
		t.Fatalf("no image was written: %s", all.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1 (not death by the signal)", err)
	}
	lines := strings.Split(strings.TrimSpace(all.String()), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{"sdtool: generate: interrupted (received SIGINT)", "of prompt ", "holds what was collected so far"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	m, err := imatrix.Open(dat)
	if err != nil {
		t.Fatalf("the collected imatrix: %v", err)
	}
	if len(m.Entries) == 0 || m.ChunkCount == 0 {
		t.Errorf("the collected imatrix has %d entries, %d evaluations", len(m.Entries), m.ChunkCount)
	}
	if _, err := os.Stat(filepath.Join(dir, "x-40.png")); err == nil {
		t.Error("the run went on to the last prompt")
	}
	if _, err := os.Stat(dat + ".partial"); err == nil {
		t.Error("a .partial file was left")
	}
}
