package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/tensor"
)

// rawInput writes a raw file holding two F16 tensors and returns a model
// over it; the file is read-only, and its bytes and mtime are returned so
// tests can check it was left untouched.
func rawInput(t *testing.T, dir string) (*fileModel, []byte, time.Time) {
	t.Helper()
	path := filepath.Join(dir, "in.raw")
	a, b := f16Data(64*128, 11), f16Data(3*32, 12)
	data := append(append([]byte{}, a...), b...)
	if err := os.WriteFile(path, data, 0o444); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m := &fileModel{f: f, tensors: []formats.Tensor{
		{Name: "w", Type: formats.F16, Shape: []int64{64, 128}, File: path, Offset: 0, Size: int64(len(a))},
		{Name: "b", Type: formats.F16, Shape: []int64{3, 32}, File: path, Offset: int64(len(a)), Size: int64(len(b))},
	}}
	return m, data, old
}

func untouched(t *testing.T, m *fileModel, data []byte, mtime time.Time) {
	t.Helper()
	path := m.tensors[0].File
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(b, data) {
		t.Errorf("input %s changed (%v)", path, err)
	}
	if st, err := os.Stat(path); err != nil || !st.ModTime().Equal(mtime) {
		t.Errorf("input %s modified at %v, want %v", path, st.ModTime(), mtime)
	}
}

func TestNoSpaceLeft(t *testing.T) {
	dir := t.TempDir()
	m, data, mtime := rawInput(t, dir)
	plan := copyPlan(m)
	tensors, _ := plan.Tensors()
	_, _, size := fakeHeader(tensors)
	for _, limit := range []int64{0, 10, 100, 5000, size / 2, size - 1} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			out := filepath.Join(dir, "out.fake")
			err := Run(context.Background(), at(plan, out, func(w io.Writer, ts []formats.Tensor) (formats.TensorWriter, error) {
				return newFakeWriter(&enospcWriter{w: w, limit: limit}, ts)
			}, []string{m.tensors[0].File}...), Options{
				ChunkBytes: 1024,
				MaxMemory:  4096,
			})
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, "no space left on device") || !strings.HasPrefix(msg, out+":") || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("error %q does not say the disk is full, wrapped with the output path", msg)
			}
			if _, err := os.Lstat(out); err == nil {
				t.Error("output exists after a failed run")
			}
			noPartial(t, out)
			untouched(t, m, data, mtime)
		})
	}
}

func TestInterrupted(t *testing.T) {
	dir := t.TempDir()
	m, data, mtime := rawInput(t, dir)
	out := filepath.Join(dir, "out.fake")

	t.Run("mid-run", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		plan := copyPlan(m)
		// Cancel from inside the run, after a few chunks were produced.
		inner := plan.Outputs[0].Producer
		var n int
		plan.Outputs[0].Producer = ProducerFunc(func(c context.Context, dst []byte, first, rows int64, s *tensor.Scratch) error {
			if n++; n == 3 {
				cancel()
			}
			return inner.Produce(c, dst, first, rows, s)
		})
		err := Run(ctx, at(plan, out, newFakeWriter), Options{Threads: 1, ChunkBytes: 512, MaxMemory: 2048})
		if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("error %v, want interrupted", err)
		}
		if !strings.HasPrefix(err.Error(), out+": interrupted") {
			t.Errorf("error %q does not start with the output path", err)
		}
		noPartial(t, out)
	})

	t.Run("signal while producers block", func(t *testing.T) {
		// The command cancels with a cause that names the signal.
		signal := errors.New("received SIGINT")
		ctx, cancel := context.WithCancelCause(context.Background())
		plan := copyPlan(m)
		plan.Outputs[1].Producer = ProducerFunc(func(c context.Context, _ []byte, _, _ int64, _ *tensor.Scratch) error {
			<-c.Done() // a long producer that honours cancellation
			return c.Err()
		})
		time.AfterFunc(50*time.Millisecond, func() { cancel(signal) })
		start := time.Now()
		err := Run(ctx, at(plan, out, newFakeWriter), Options{Threads: 4})
		if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "interrupted (received SIGINT)") {
			t.Fatalf("error %v, want interrupted by SIGINT", err)
		}
		if !errors.Is(err, signal) {
			t.Errorf("error %v does not carry the cause", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Run took %v to stop", d)
		}
		noPartial(t, out)
	})

	t.Run("before start", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Run(ctx, at(copyPlan(m), out, newFakeWriter), Options{})
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("error %v, want interrupted", err)
		}
		noPartial(t, out)
	})
	if _, err := os.Lstat(out); err == nil {
		t.Error("output exists after interrupted runs")
	}
	untouched(t, m, data, mtime)
}

func TestOutputIsInput(t *testing.T) {
	dir := t.TempDir()
	m, data, mtime := rawInput(t, dir)
	in := m.tensors[0].File
	sym := filepath.Join(dir, "sym.raw")
	hard := filepath.Join(dir, "hard.raw")
	if err := os.Symlink(in, sym); err != nil {
		t.Skipf("cannot make symlinks here: %v", err)
	}
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	partialIn := filepath.Join(dir, "x.fake"+PartialSuffix)
	if err := os.Link(in, partialIn); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, in)
	if err != nil {
		rel = in
	}
	cases := []struct {
		name, out string
		inputs    []string
	}{
		{"same path", in, []string{in}},
		{"relative path", rel, []string{in}},
		{"unclean path", filepath.Join(dir, ".", "sub", "..", "in.raw"), []string{in}},
		{"symlink", sym, []string{in}},
		{"input via symlink", in, []string{sym}},
		{"hard link", hard, []string{in}},
		{"partial is input", filepath.Join(dir, "x.fake"), []string{partialIn}},
		{"partial is input by link", filepath.Join(dir, "x.fake"), []string{in}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Force must not override this refusal.
			err := Run(context.Background(), at(copyPlan(m), c.out, newFakeWriter, c.inputs...), Options{Force: true})
			if !errors.Is(err, ErrOutputIsInput) || !strings.Contains(err.Error(), "input") {
				t.Fatalf("error %v, want refusal", err)
			}
		})
	}
	untouched(t, m, data, mtime)
	if b, err := os.ReadFile(partialIn); err != nil || !bytes.Equal(b, data) {
		t.Errorf("input named like a partial file was changed or removed (%v)", err)
	}
}

func TestExistingOutput(t *testing.T) {
	dir := t.TempDir()
	m, _, _ := rawInput(t, dir)
	out := filepath.Join(dir, "out.fake")
	if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), at(copyPlan(m), out, newFakeWriter), Options{})
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "use Force") {
		t.Fatalf("error %v, want a refusal naming the Force option", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "previous" {
		t.Fatal("existing output changed without --force")
	}
	if err := Run(context.Background(), at(copyPlan(m), out, newFakeWriter), Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, data := readFake(t, out); len(data) != 2 {
		t.Error("output not replaced with --force")
	}
	noPartial(t, out)

	if err := Run(context.Background(), at(copyPlan(m), dir, newFakeWriter), Options{Force: true}); err == nil {
		t.Error("a directory as output was accepted")
	}
}

func TestStalePartialReplaced(t *testing.T) {
	dir := t.TempDir()
	m, _, _ := rawInput(t, dir)
	out := filepath.Join(dir, "out.fake")
	if err := os.WriteFile(out+PartialSuffix, bytes.Repeat([]byte("junk"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), at(copyPlan(m), out, newFakeWriter), Options{}); err != nil {
		t.Fatal(err)
	}
	names, _ := readFake(t, out)
	if len(names) != 2 {
		t.Errorf("tensors %v", names)
	}
	noPartial(t, out)
}

func TestProducerErrorNamesTensor(t *testing.T) {
	dir := t.TempDir()
	m := testModel(t)
	m.ReadErr["bias"] = errors.New("disk read failed")
	out := filepath.Join(dir, "out.fake")
	err := Run(context.Background(), at(copyPlan(m), out, newFakeWriter), Options{})
	if err == nil || !strings.Contains(err.Error(), `tensor "bias"`) || !strings.Contains(err.Error(), "disk read failed") ||
		!strings.Contains(err.Error(), m.Name) {
		t.Fatalf("error %v, want the file, the tensor and the problem", err)
	}
	if strings.Count(err.Error(), `tensor "bias"`) != 1 {
		t.Errorf("error %q names the tensor more than once", err)
	}
	noPartial(t, out)

	// A producer that does not name the tensor gets it named.
	plan := &Plan{Outputs: []Output{{Name: "gen", Type: formats.F32, Shape: []int64{4}, Producer: ProducerFunc(
		func(context.Context, []byte, int64, int64, *tensor.Scratch) error { return errors.New("boom") })}}}
	err = Run(context.Background(), at(plan, out, newFakeWriter), Options{})
	if err == nil || !strings.Contains(err.Error(), `tensor "gen": boom`) {
		t.Fatalf("error %v", err)
	}
	noPartial(t, out)

	// A source shorter than its descriptor says is an unexpected EOF.
	short := newMemModel("short.raw")
	st := short.add("s", formats.F32, []int64{8}, make([]byte, 20))
	st.Size = 32
	short.List[0] = st
	plan = &Plan{Outputs: []Output{{Name: "s", Type: formats.F32, Shape: []int64{8}, Producer: Copy(short, st)}}}
	err = Run(context.Background(), at(plan, out, newFakeWriter), Options{})
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), `short.raw: tensor "s"`) {
		t.Fatalf("error %v", err)
	}
	noPartial(t, out)
}

// TestTmpfsFull fills a real 1 MiB tmpfs when running as root where mounting
// is allowed, so that the ENOSPC comes from the kernel.
func TestTmpfsFull(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux")
	}
	mnt := t.TempDir()
	if out, err := mountTmpfs(mnt); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	defer unmount(t, mnt)
	m := newMemModel("in.mem")
	m.add("w", formats.F16, []int64{1024, 1024}, f16Data(1024*1024, 7)) // 2 MiB, twice the disk
	out := filepath.Join(mnt, "out.fake")
	err := Run(context.Background(), at(copyPlan(m), out, newFakeWriter), Options{})
	if err == nil || !strings.Contains(err.Error(), "no space left on device") || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("error %v, want no space left on device", err)
	}
	noPartial(t, out)
	ents, _ := os.ReadDir(mnt)
	if len(ents) != 0 {
		t.Errorf("files left on the full disk: %v", ents)
	}
}

func mountTmpfs(dir string) ([]byte, error) {
	return exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "sdtool-test", dir).CombinedOutput()
}

func unmount(t *testing.T, dir string) {
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v %s", dir, err, out)
	}
}

func TestProducerPanic(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.fake")
	plan := &Plan{Outputs: []Output{{Name: "p", Type: formats.F32, Shape: []int64{16, 4}, Producer: ProducerFunc(
		func(_ context.Context, dst []byte, _, _ int64, _ *tensor.Scratch) error {
			_ = dst[len(dst)]
			return nil
		})}}}
	err := Run(context.Background(), at(plan, out, newFakeWriter), Options{})
	if err == nil || !strings.Contains(err.Error(), `tensor "p"`) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("error %v", err)
	}
	noPartial(t, out)
}

// TestPartialReplacedByAnotherRun simulates a second run that replaced our
// .partial while we wrote: we must neither publish its file as ours nor
// delete it.
func TestPartialReplacedByAnotherRun(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("an open file cannot be replaced on Windows")
	}
	out := filepath.Join(t.TempDir(), "out.fake")
	partial := out + PartialSuffix
	plan := &Plan{Outputs: []Output{{Name: "x", Type: formats.F32, Shape: []int64{4}, Producer: ProducerFunc(
		func(context.Context, []byte, int64, int64, *tensor.Scratch) error {
			if err := os.Remove(partial); err != nil {
				return err
			}
			return os.WriteFile(partial, []byte("theirs"), 0o644)
		})}}}
	err := Run(context.Background(), at(plan, out, newFakeWriter), Options{})
	if err == nil || !strings.Contains(err.Error(), "replaced by another process") {
		t.Fatalf("error %v", err)
	}
	if b, err := os.ReadFile(partial); err != nil || string(b) != "theirs" {
		t.Errorf("the other run's partial file was touched: %q %v", b, err)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Error("published a file that is not ours")
	}
}
