package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/peakrss"
	"github.com/sdtool/sdtool/tensor"
)

// encodeNegToy negates its input in place, then encodes it with the toy
// codec: a RunAll that handed one buffer to several encoders would feed
// the next one negated values.
func encodeNegToy(dst []byte, src []float32, rowLen int) error {
	for i := range src {
		src[i] = -src[i]
	}
	return encodeToy(dst, src, rowLen)
}

// countingModel counts the bytes read of every tensor.
type countingModel struct {
	*memModel
	mu   sync.Mutex
	read map[string]int64
}

func (c *countingModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	n, err := c.memModel.ReadTensorAt(t, p, off)
	c.mu.Lock()
	c.read[t.Name] += int64(n)
	c.mu.Unlock()
	return n, err
}

// ladderModel has weights whose rows suit the toy codec, a reshaped
// tensor, a 1-D bias, an empty tensor and a scalar.
func ladderModel(t *testing.T) *countingModel {
	m := newMemModel(filepath.Join(t.TempDir(), "in.fake"))
	m.add("a.weight", formats.F16, []int64{96, 256}, f16Data(96*256, 1))
	m.add("a.bias", formats.F16, []int64{96}, f16Data(96, 2))
	m.add("empty", formats.F16, []int64{0, 64}, nil)
	m.add("b.weight", formats.F16, []int64{40, 3, 3, 32}, f16Data(40*3*3*32, 3))
	m.add("scalar", formats.F32, nil, []byte{0, 0, 0x80, 0x3f})
	m.add("c.weight", formats.F16, []int64{7, 64}, f16Data(7*64, 4))
	return &countingModel{memModel: m, read: map[string]int64{}}
}

// ladderPlans returns three plans over m that differ the way a ladder's
// rungs do: a destructive encoder with b.weight stored with rows of 96
// instead of 32, weights as F32 with a marker tensor after each, and
// toy-quantized weights with copied biases.
func ladderPlans(m formats.Model, dir string) []*Plan {
	var plans []*Plan
	for k := range 3 {
		p := &Plan{}
		for _, tt := range m.Tensors() {
			src := tt
			s := tensor.Plain(m, tt)
			weight := strings.HasSuffix(tt.Name, ".weight")
			switch {
			case k == 2 && weight:
				p.Outputs = append(p.Outputs, Output{Name: tt.Name, Type: toyType, Shape: tt.Shape, Producer: Convert(s, toyType, encodeToy), Source: &src})
			case k == 1 && weight:
				p.Outputs = append(p.Outputs,
					Output{Name: tt.Name, Type: formats.F32, Shape: tt.Shape, Producer: Convert(s, formats.F32, encodeF32), Source: &src},
					Output{Name: tt.Name + ".marker", Type: formats.U8, Shape: []int64{3}, Producer: Constant([]byte{1, 2, 3})})
			case k == 0 && tt.Name == "b.weight":
				p.Outputs = append(p.Outputs, Output{Name: tt.Name, Type: toyType, Shape: []int64{120, 96}, Producer: Convert(s, toyType, encodeNegToy), Source: &src})
			case k == 0 && weight:
				p.Outputs = append(p.Outputs, Output{Name: tt.Name, Type: toyType, Shape: tt.Shape, Producer: Convert(s, toyType, encodeNegToy), Source: &src})
			case tt.Type == formats.F16 && k == 1:
				p.Outputs = append(p.Outputs, Output{Name: tt.Name, Type: formats.F32, Shape: tt.Shape, Producer: Convert(s, formats.F32, encodeF32), Source: &src})
			default:
				p.Outputs = append(p.Outputs, Output{Name: tt.Name, Type: tt.Type, Shape: tt.Shape, Producer: Copy(m, tt), Source: &src})
			}
		}
		plans = append(plans, at(p, filepath.Join(dir, fmt.Sprintf("out%d.fake", k)), nil, m.Path()))
	}
	return plans
}

// RunAll must write every plan byte for byte as Run writes it alone, for
// any thread count and chunk budget, report the files' digests, and read
// every converted source once where separate runs read it once per plan.
func TestRunAllMatchesRun(t *testing.T) {
	for _, c := range []struct {
		threads int
		mem     int64
	}{{1, 0}, {3, 0}, {2, 2 << 10}, {4, 5 << 10}} {
		t.Run(fmt.Sprintf("threads%d-mem%d", c.threads, c.mem), func(t *testing.T) {
			m := ladderModel(t)
			dir := t.TempDir()
			opts := Options{Threads: c.threads, MaxMemory: c.mem, ChunkBytes: c.mem / 8}
			var want [][]byte
			for _, p := range ladderPlans(m, filepath.Join(dir)) {
				p.Path += ".single"
				if err := Run(context.Background(), p, opts); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(p.Path)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, b)
			}
			separate := m.read["a.weight"]
			clear(m.read)
			plans := ladderPlans(m, dir)
			written, err := RunAll(context.Background(), plans, opts)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range plans {
				got, err := os.ReadFile(p.Path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[i]) {
					t.Errorf("%s differs from a Run of the same plan (%d vs %d bytes)", p.Path, len(got), len(want[i]))
				}
				if written[i].Path != p.Path || written[i].Bytes != int64(len(got)) || written[i].SHA256 != sha256.Sum256(got) {
					t.Errorf("%s: RunAll reports %s, %d bytes, %x", p.Path, written[i].Path, written[i].Bytes, written[i].SHA256)
				}
				noPartial(t, p.Path)
			}
			// a.weight is converted by every plan, b.weight and c.weight too
			// (with other rows in one plan).
			for _, name := range []string{"a.weight", "b.weight", "c.weight"} {
				tt := find(t, m, name)
				if m.read[name] != tt.Size {
					t.Errorf("RunAll read %d bytes of %s, which has %d", m.read[name], name, tt.Size)
				}
			}
			if separate != 3*find(t, m, "a.weight").Size {
				t.Errorf("three Runs read %d bytes of a.weight", separate)
			}
		})
	}
}

func find(t *testing.T, m formats.Model, name string) formats.Tensor {
	for _, tt := range m.Tensors() {
		if tt.Name == name {
			return tt
		}
	}
	t.Fatalf("no tensor %q", name)
	return formats.Tensor{}
}

// A failing read, a cancellation and a refused output leave no file of
// any plan behind.
func TestRunAllFailureRemovesEveryPartial(t *testing.T) {
	empty := func(t *testing.T, dir string) {
		t.Helper()
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	t.Run("read error", func(t *testing.T) {
		m := ladderModel(t)
		m.ReadErr["c.weight"] = errors.New("disk on fire")
		dir := t.TempDir()
		_, err := RunAll(context.Background(), ladderPlans(m, dir), Options{Threads: 2})
		if err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), "partial output removed") {
			t.Fatalf("err = %v", err)
		}
		empty(t, dir)
	})
	t.Run("cancelled", func(t *testing.T) {
		m := ladderModel(t)
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		opts := Options{Threads: 2, MaxMemory: 4 << 10, ChunkBytes: 512, Progress: func(done, total int64) {
			if done > total/3 {
				cancel()
			}
		}}
		_, err := RunAll(ctx, ladderPlans(m, dir), opts)
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("err = %v, want ErrInterrupted", err)
		}
		empty(t, dir)
	})
	t.Run("existing output", func(t *testing.T) {
		m := ladderModel(t)
		dir := t.TempDir()
		plans := ladderPlans(m, dir)
		if err := os.WriteFile(plans[2].Path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := RunAll(context.Background(), plans, Options{})
		if !errors.Is(err, ErrExists) {
			t.Fatalf("err = %v, want ErrExists", err)
		}
		es, _ := os.ReadDir(dir)
		if len(es) != 1 {
			t.Errorf("%d files in the folder, want the old output only", len(es))
		}
	})
}

// A commit that fails after earlier ones succeeded returns and names the
// complete files already published and removes every later partial.
func TestRunAllFailedCommitNamesPublished(t *testing.T) {
	m := ladderModel(t)
	dir := t.TempDir()
	plans := ladderPlans(m, dir)
	if len(plans) < 3 {
		t.Fatalf("%d plans, want 3 or more", len(plans))
	}
	blocked := false
	opts := Options{Threads: 2, Progress: func(done, total int64) {
		if !blocked {
			// A folder appears where the second output goes: its rename fails.
			blocked = os.MkdirAll(filepath.Join(plans[1].Path, "x"), 0o755) == nil
		}
	}}
	w, err := RunAll(context.Background(), plans, opts)
	if err == nil || !strings.Contains(err.Error(), "already published, complete: "+plans[0].Path) {
		t.Fatalf("err = %v", err)
	}
	if len(w) != 1 || w[0].Path != plans[0].Path {
		t.Fatalf("written = %+v, want the first plan only", w)
	}
	if _, err := os.Stat(plans[0].Path); err != nil {
		t.Errorf("first output: %v", err)
	}
	for _, p := range plans[1:] {
		if _, err := os.Stat(p.Path + ".partial"); !os.IsNotExist(err) {
			t.Errorf("%s.partial left behind (%v)", p.Path, err)
		}
	}
	for _, p := range plans[2:] {
		if _, err := os.Stat(p.Path); !os.IsNotExist(err) {
			t.Errorf("%s published after the failed commit (%v)", p.Path, err)
		}
	}
}

const multiMemChildEnv = "SDTOOL_PIPELINE_MULTIMEMCHILD"

// TestRunAllPeakMemory writes four plans from sparse F16 inputs of 64 MiB
// and 512 MiB in child processes with a 16 MiB budget: peak resident
// memory must not grow with the model and must stay near four budgets.
func TestRunAllPeakMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns two runs over sparse files")
	}
	dir := peakrss.ScratchDir(t)
	small, big := peakrss.Growth(t, "TestRunAllMemoryChild",
		fmt.Sprintf("%s=%d:%s", multiMemChildEnv, memSmall, dir), fmt.Sprintf("%s=%d:%s", multiMemChildEnv, memBig(), dir))
	small, big = small>>10, big>>10
	t.Logf("peak RSS: %d MiB for %d MiB in, %d MiB for %d MiB in (4 outputs, budget 16 MiB)", small, memSmall, big, memBig())
	if big-small >= 32 {
		t.Errorf("peak RSS grew by %d MiB with the input (%d -> %d MiB)", big-small, small, big)
	}
	if big > 4*16+96 {
		t.Errorf("peak RSS %d MiB for four outputs of a 16 MiB budget", big)
	}
}

// TestRunAllMemoryChild is the body of TestRunAllPeakMemory's children.
func TestRunAllMemoryChild(t *testing.T) {
	spec := os.Getenv(multiMemChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestRunAllPeakMemory")
	}
	sizeStr, dir, _ := strings.Cut(spec, ":")
	mib, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, fmt.Sprintf("multi-in-%d.raw", mib))
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(mib << 20); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(in)
	const rows, cols = 1024, 4096
	const tsize = rows * cols * 2
	m := &fileModel{f: f}
	for off := int64(0); off+tsize <= mib<<20; off += tsize {
		m.tensors = append(m.tensors, formats.Tensor{Name: fmt.Sprintf("t%d", off/tsize), Type: formats.F16, Shape: []int64{rows, cols}, File: in, Offset: off, Size: tsize})
	}
	var plans []*Plan
	for k := range 4 {
		var p Plan
		for _, tt := range m.tensors {
			p.Outputs = append(p.Outputs, Output{Name: tt.Name, Type: toyType, Shape: tt.Shape, Producer: Convert(tensor.Plain(m, tt), toyType, encodeToy)})
		}
		out := filepath.Join(dir, fmt.Sprintf("multi-out-%d-%d.fake", mib, k))
		defer os.Remove(out)
		plans = append(plans, at(&p, out, newFakeWriter, in))
	}
	if _, err := RunAll(context.Background(), plans, Options{Threads: 2, MaxMemory: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	peakrss.Report(t)
}
