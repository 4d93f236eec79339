package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/peakrss"
	"github.com/sdtool/sdtool/tensor"
)

const memChildEnv = "SDTOOL_PIPELINE_MEMCHILD"

// TestPeakMemoryIndependentOfSize converts sparse F16 inputs of 64 MiB and
// 512 MiB in child processes with a 16 MiB budget and checks that their peak
// resident memory differs by less than a constant: memory must not grow
// with the model.
// memSmall is the smaller input (MiB) of the peak-memory tests.
const memSmall = 64

// memBig is their larger input (MiB): 512 in the long run (SDTOOL_LONG=1),
// else 256, still four times the small one, so that memory growing with
// the input (about 190 MiB more) stands far above the 32 MiB allowed.
func memBig() int {
	if longtest.Enabled() {
		return 512
	}
	return 256
}

func TestPeakMemoryIndependentOfSize(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns two conversions of sparse files")
	}
	dir := peakrss.ScratchDir(t)
	small, big := peakrss.Growth(t, "TestMemoryChild",
		fmt.Sprintf("%s=%d:%s", memChildEnv, memSmall, dir), fmt.Sprintf("%s=%d:%s", memChildEnv, memBig(), dir))
	small, big = small>>10, big>>10
	t.Logf("peak RSS: %d MiB for %d MiB in, %d MiB for %d MiB in (budget 16 MiB)", small, memSmall, big, memBig())
	if big-small >= 32 {
		t.Errorf("peak RSS grew by %d MiB with the input (%d -> %d MiB)", big-small, small, big)
	}
	if big > 96 {
		t.Errorf("peak RSS %d MiB for a 16 MiB budget", big)
	}
}

// TestMemoryChild is the body of the child processes of
// TestPeakMemoryIndependentOfSize; it does nothing in a normal test run.
func TestMemoryChild(t *testing.T) {
	spec := os.Getenv(memChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestPeakMemoryIndependentOfSize")
	}
	sizeStr, dir, _ := strings.Cut(spec, ":")
	mib, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, fmt.Sprintf("in-%d.raw", mib))
	out := filepath.Join(dir, fmt.Sprintf("out-%d.fake", mib))
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(mib << 20); err != nil { // sparse: reads return zeros without disk I/O
		t.Fatal(err)
	}
	defer os.Remove(in)
	defer os.Remove(out)
	// 8 MiB tensors of F16 [1024, 4096].
	const rows, cols = 1024, 4096
	const tsize = rows * cols * 2
	m := &fileModel{f: f}
	var plan Plan
	for off := int64(0); off+tsize <= mib<<20; off += tsize {
		tt := formats.Tensor{Name: fmt.Sprintf("t%d", off/tsize), Type: formats.F16, Shape: []int64{rows, cols}, File: in, Offset: off, Size: tsize}
		m.tensors = append(m.tensors, tt)
		plan.Outputs = append(plan.Outputs, Output{Name: tt.Name, Type: toyType, Shape: tt.Shape, Producer: Convert(tensor.Plain(m, tt), toyType, encodeToy)})
	}
	err = Run(context.Background(), at(&plan, out, newFakeWriter, []string{in}...), Options{Threads: 2, MaxMemory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	peakrss.Report(t)
}
