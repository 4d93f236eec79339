//go:build unix

package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	_ "github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

func TestSignalContext(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		ctx, stop := SignalContext()
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%v did not cancel the context", sig)
		}
		var se *SignalError
		if !errors.As(context.Cause(ctx), &se) || se.Signal != sig {
			t.Errorf("cause %v, want %v", context.Cause(ctx), sig)
		}
		stop()
	}
	ctx, stop := SignalContext()
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Errorf("stop: cause %v", context.Cause(ctx))
	}
}

const sigChildEnv = "SDTOOL_CONSOLE_SIGCHILD"

// TestSIGINTRemovesPartial sends a real SIGINT to a child process in the
// middle of a run and checks what the user would see: the error says
// interrupted, and neither the output nor its .partial file is left.
func TestSIGINTRemovesPartial(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalChild$")
	cmd.Env = append(os.Environ(), sigChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	ready := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "READY" && !ready {
			ready = true
			if _, err := os.Stat(filepath.Join(dir, "out.gguf"+pipeline.PartialSuffix)); err != nil {
				t.Errorf("no partial file while running: %v", err)
			}
			cmd.Process.Signal(os.Interrupt)
		}
	}
	cmd.Wait()
	all := strings.Join(lines, "\n")
	if !ready || !strings.Contains(all, "ERR "+filepath.Join(dir, "out.gguf")+": interrupted (received SIGINT)") {
		t.Fatalf("child output:\n%s\n%s", all, stderr.String())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("files left: %v", ents)
	}
}

// TestSignalChild is the child of TestSIGINTRemovesPartial.
func TestSignalChild(t *testing.T) {
	dir := os.Getenv(sigChildEnv)
	if dir == "" {
		t.Skip("runs only as a child of TestSIGINTRemovesPartial")
	}
	ctx, stop := SignalContext()
	defer stop()
	var once sync.Once
	prod := pipeline.ProducerFunc(func(c context.Context, dst []byte, first, _ int64, _ *tensor.Scratch) error {
		if first > 0 {
			once.Do(func() { fmt.Println("READY") })
			<-c.Done()
			return c.Err()
		}
		return nil
	})
	out := filepath.Join(dir, "out.gguf")
	format, err := formats.CreatorFor(out)
	if err != nil {
		t.Fatal(err)
	}
	plan := &pipeline.Plan{Path: out, Format: format, Outputs: []pipeline.Output{{Name: "w", Type: formats.F32, Shape: []int64{1024, 256}, Producer: prod}}}
	err = pipeline.Run(ctx, plan, pipeline.Options{ChunkBytes: 64 << 10, Threads: 2})
	fmt.Printf("ERR %v\n", err)
}
