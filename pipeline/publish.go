package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/internal/option"
)

// PartialSuffix is appended to the output path while it is being written.
const PartialSuffix = ".partial"

// Errors wrapped by Run's errors, for errors.Is.
var (
	// ErrInterrupted means the context was cancelled (Ctrl-C, SIGTERM) before the output was complete.
	ErrInterrupted = errors.New("interrupted")
	// ErrExists means the output exists and Force was not set.
	ErrExists = errors.New("already exists")
	// ErrOutputIsInput means the output (or its .partial file) is one of the inputs.
	ErrOutputIsInput = errors.New("output is one of the inputs")
)

// PublishOptions are the rules an output is written under.
type PublishOptions struct {
	// Force allows replacing an existing output (never an input).
	Force bool
	// Inputs are the paths of every input file; the output and its
	// .partial must not be one of them (by path, or through links as the
	// same file).
	Inputs []string
	// Logger receives warnings (a stale .partial replaced, a directory that
	// could not be synced); nil discards them.
	Logger *slog.Logger
}

// AtomicFile is an output being written: every byte goes to PATH.partial,
// and only Commit makes it visible as PATH. It is the one way sdtool
// writes a file, so that a crash, a Ctrl-C or a full disk never leaves a
// truncated output under the final name.
type AtomicFile struct {
	f    *os.File
	path string
	log  *slog.Logger
}

// CheckOutput refuses an output that is one of the inputs (as a path, or
// as the same file through a symlink or hard link; its .partial too), that
// is a directory, or that exists when force is false. Inputs are only
// stat'ed, never opened. It also refuses a folder that cannot take a new
// file (read-only, no permission). Commands call it before long work, so
// that a bad output fails at once; CreateAtomic calls it again.
func CheckOutput(path string, inputs []string, force bool) error {
	if err := checkOutput(path, inputs, force); err != nil {
		return err
	}
	return CheckWritable(path)
}

// CheckWritable refuses an output whose folder cannot take a new file, by
// creating and removing a hidden file there: permissions alone do not say
// it (a read-only mount, root, ACLs).
func CheckWritable(out string) error {
	dir := filepath.Dir(out)
	f, err := os.CreateTemp(dir, "."+filepath.Base(out)+".probe-*")
	if err != nil {
		return fmt.Errorf("%s: cannot create it in %s: %w", out, dir, unwrapPath(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// SameFile reports whether the paths a and b name the same existing file.
func SameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// SameTarget reports whether writing a and writing b would write one
// file: the same path, the same existing file through links, or the same
// name in one folder reached through a link (for files not yet created).
func SameTarget(a, b string) bool {
	if absClean(a) == absClean(b) || SameFile(a, b) {
		return true
	}
	return filepath.Base(a) == filepath.Base(b) && SameFile(filepath.Dir(a), filepath.Dir(b))
}

// CheckNotInput refuses an output that is one of the inputs (see
// CheckOutput) without looking at whether it exists; commands use it for
// every file they write, before any work.
func CheckNotInput(out string, inputs []string) error {
	partial := out + PartialSuffix
	for _, in := range inputs {
		if SameTarget(in, out) {
			return fmt.Errorf("%s: refusing to write over input %s: %w", out, in, ErrOutputIsInput)
		}
		if SameTarget(in, partial) {
			return fmt.Errorf("%s: refusing to write %s, which is input %s: %w", out, partial, in, ErrOutputIsInput)
		}
	}
	return nil
}

// CreateAtomic checks path against o (see CheckOutput) and creates
// PATH.partial exclusively, never through a symlink (O_EXCL refuses one).
// A .partial left by a crashed run is replaced: no sdtool process writes it
// once that run is gone, it can never be a valid output, and keeping it
// would block every later run. Two runs writing the same output at once
// are caught by Commit.
func CreateAtomic(path string, o PublishOptions) (*AtomicFile, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkOutput(path, o.Inputs, o.Force); err != nil {
		return nil, err
	}
	f, err := createPartial(path, log)
	if err != nil {
		return nil, err
	}
	return &AtomicFile{f: f, path: path, log: log}, nil
}

// Write appends p to the partial file.
func (a *AtomicFile) Write(p []byte) (int, error) { return a.f.Write(p) }

// Size returns the bytes written so far.
func (a *AtomicFile) Size() (int64, error) {
	st, err := a.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Commit makes the complete output durable and visible: fsync, close,
// rename over PATH, fsync the directory. On failure the partial file is
// removed and the error, prefixed with PATH, says so.
func (a *AtomicFile) Commit() error {
	if err := publish(a.f, a.path, a.log); err != nil {
		return failed(context.Background(), a.f, a.path, err)
	}
	return nil
}

// Abort closes and removes the partial file after err, and returns the
// error to report: prefixed with PATH, saying what became of the partial
// file; it wraps ErrInterrupted (and the context's cause) when ctx was
// cancelled, and says "no space left on device" when the disk is full.
func (a *AtomicFile) Abort(ctx context.Context, err error) error {
	return failed(ctx, a.f, a.path, err)
}

// WriteAtomic writes a whole file through an AtomicFile: write gets a
// buffered writer on PATH.partial, and the file is committed when write
// succeeds and aborted otherwise.
func WriteAtomic(ctx context.Context, path string, o PublishOptions, write func(w io.Writer) error) error {
	a, err := CreateAtomic(path, o)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(a, writeBufferBytes)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return a.Abort(ctx, err)
	}
	return a.Commit()
}

// absClean returns the absolute, cleaned form of p, or p cleaned when the
// working directory is unknown.
func absClean(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// checkOutput refuses an output that is one of the inputs (as a path, or as
// the same file through a symlink or hard link; the .partial file too) and an
// existing output without force. Inputs are only stat'ed, never opened.
func checkOutput(out string, inputs []string, force bool) error {
	if err := CheckNotInput(out, inputs); err != nil {
		return err
	}
	outSt, outErr := os.Stat(out)
	if outErr == nil {
		if outSt.IsDir() {
			return fmt.Errorf("%s: is a directory", out)
		}
		if !force {
			return option.Errorf("%s: %w (use %s to replace it)", out, ErrExists, option.Name("Force"))
		}
	} else if !errors.Is(outErr, fs.ErrNotExist) {
		if err := checkFolder(out); err != nil {
			return err
		}
		return fmt.Errorf("%s: %w", out, unwrapPath(outErr))
	}
	return checkFolder(out)
}

// checkFolder refuses an output whose folder is missing or is not a
// folder, naming the folder, so that a command fails before its work and
// not when it creates the file.
func checkFolder(out string) error {
	dir := filepath.Dir(out)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: folder %s does not exist", out, dir)
	case err != nil:
		return fmt.Errorf("%s: folder %s: %w", out, dir, unwrapPath(err))
	case !st.IsDir():
		return fmt.Errorf("%s: %s is not a folder", out, dir)
	}
	return nil
}

// unwrapPath returns the cause of a *fs.PathError, whose message repeats a
// path (often the internal .partial one) that the caller names better.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// createPartial creates OUT.partial exclusively. A .partial left by a crashed
// run (no sdtool process is writing it once that run is gone) is removed and
// replaced: keeping it would block every later run until the user deletes it
// by hand, and it can never be a valid output. Two runs writing the same
// output at once are detected at publish time instead (see publish).
func createPartial(out string, log *slog.Logger) (*os.File, error) {
	partial := out + PartialSuffix
	if st, err := os.Lstat(partial); err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s: %s exists and is a directory", out, partial)
		}
		log.Warn("removing a partial output left by an earlier run", "path", partial, "bytes", st.Size(), "modified", st.ModTime())
		if err := os.Remove(partial); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: removing stale %s: %w", out, partial, err)
		}
	}
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: folder %s does not exist", out, filepath.Dir(out))
		}
		// The .partial name is an internal detail: say what could not be done.
		return nil, fmt.Errorf("%s: cannot create it in %s: %w", out, filepath.Dir(out), unwrapPath(err))
	}
	return f, nil
}

// stillOurs reports whether path still names the file f (no other run
// removed and recreated it meanwhile).
func stillOurs(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Lstat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// publish makes the complete output durable and visible: fsync, close,
// rename over OUT, fsync the directory so that the rename survives a crash.
func publish(f *os.File, out string, log *slog.Logger) error {
	partial := out + PartialSuffix
	if err := f.Sync(); err != nil {
		return err
	}
	if !stillOurs(f, partial) {
		return fmt.Errorf("%s was replaced by another process while this run wrote it", partial)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(partial, out); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(out)); err != nil {
		// The output is complete and renamed; only its durability across a
		// power loss is in doubt, which is no reason to fail the command.
		log.Warn("could not sync the output directory", "dir", filepath.Dir(out), "err", err)
	}
	return nil
}

// syncDir fsyncs a directory; Windows has no such operation (renames are
// journaled by NTFS), so it is skipped there.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// failed closes and removes the partial output and turns err into the error
// Run returns: what happened, wrapped with the output path.
func failed(ctx context.Context, f *os.File, out string, err error) error {
	partial := out + PartialSuffix
	// Remove the partial file only if it is still ours: another run that
	// replaced it (see createPartial) owns the file at that path now. When f
	// is already closed (publish failed at the rename), it was checked just
	// before.
	ours := true
	if a, err := f.Stat(); err == nil {
		if b, err := os.Lstat(partial); err == nil && !os.SameFile(a, b) {
			ours = false
		}
	}
	_ = f.Close() // the run already failed; a close error adds nothing.
	note := "partial output removed"
	if !ours {
		note = "partial file left to the process that replaced it"
	} else if _, err := os.Lstat(partial); err == nil {
		if err := os.Remove(partial); err != nil {
			note = fmt.Sprintf("could not remove %s: %v", partial, err)
		}
	}
	if ctx.Err() != nil {
		return interrupted(out, ctx, note)
	}
	if isNoSpace(err) && !strings.Contains(err.Error(), "no space left on device") {
		return fmt.Errorf("%s: no space left on device: %w (%s)", out, err, note)
	}
	return fmt.Errorf("%s: %w (%s)", out, err, note)
}

// interruptError is the error of a cancelled run; it wraps ErrInterrupted
// and the context's cause (context.Canceled, a SignalError, ...).
type interruptError struct {
	out, note string
	cause     error
}

// Error says which output was interrupted, by what, and what became of the partial file.
func (e *interruptError) Error() string {
	s := e.out + ": interrupted"
	if e.cause != nil && e.cause != context.Canceled {
		s += " (" + e.cause.Error() + ")"
	}
	return s + "; " + e.note
}

// Unwrap returns ErrInterrupted and the cause.
func (e *interruptError) Unwrap() []error { return []error{ErrInterrupted, e.cause} }

func interrupted(out string, ctx context.Context, note string) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.Canceled
	}
	return &interruptError{out: out, note: note, cause: cause}
}

// nameTensor prefixes err with the output tensor's name unless the message
// already names it (source readers name the file and the tensor themselves).
func nameTensor(name string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "tensor "+strconv.Quote(name)) {
		return err
	}
	return fmt.Errorf("tensor %q: %w", name, err)
}
