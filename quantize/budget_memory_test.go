package quantize

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/peakrss"
)

const budgetMemChildEnv = "SDTOOL_BUDGET_MEMCHILD"

// TestBudgetMemoryIndependentOfSize measures a budget (every candidate's
// error of every tensor) over sparse F16 safetensors inputs of 32 MiB and
// 256 MiB in child processes and checks that their peak resident memory
// differs by less than a constant: measuring must not hold the model.
func TestBudgetMemoryIndependentOfSize(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns two budget measurements of sparse files")
	}
	dir := peakrss.ScratchDir(t)
	small, big := peakrss.Growth(t, "TestBudgetMemoryChild",
		fmt.Sprintf("%s=32:%s", budgetMemChildEnv, dir), fmt.Sprintf("%s=256:%s", budgetMemChildEnv, dir))
	small, big = small>>10, big>>10
	t.Logf("peak RSS while measuring: %d MiB for 32 MiB in, %d MiB for 256 MiB in", small, big)
	if big-small >= 32 {
		t.Errorf("peak RSS grew by %d MiB with the input (%d -> %d MiB)", big-small, small, big)
	}
}

// TestBudgetMemoryChild is the body of the child processes of
// TestBudgetMemoryIndependentOfSize; it does nothing in a normal run.
func TestBudgetMemoryChild(t *testing.T) {
	spec := os.Getenv(budgetMemChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestBudgetMemoryIndependentOfSize")
	}
	sizeStr, dir, _ := strings.Cut(spec, ":")
	mib, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, fmt.Sprintf("in-%d.safetensors", mib))
	writeSparseSafetensors(t, in, mib)
	defer os.Remove(in)
	opts := Options{Input: in, Output: filepath.Join(dir, "out.gguf"),
		Budget: &Budget{BPW: 6, Threads: 2, Candidates: []formats.DType{formats.Q4_0, formats.Q8_0}}}
	p, r, err := Plan(&opts)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if r.Budget == nil || r.Budget.Measured != mib<<19 {
		t.Fatalf("measured %v elements, want %d", r.Budget, mib<<19)
	}
	peakrss.Report(t)
}

// writeSparseSafetensors writes a safetensors file of F16 [1024, 4096]
// weights totalling mib MiB whose data is a hole (zeros without disk I/O).
func writeSparseSafetensors(t *testing.T, path string, mib int64) {
	t.Helper()
	const rows, cols = 1024, 4096
	const size = rows * cols * 2
	var b strings.Builder
	b.WriteString("{")
	for i := int64(0); i < mib<<20/size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"blk.%d.weight":{"dtype":"F16","shape":[%d,%d],"data_offsets":[%d,%d]}`, i, rows, cols, i*size, (i+1)*size)
	}
	b.WriteString("}")
	head := b.String()
	for len(head)%8 != 0 {
		head += " "
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(head)))
	f.Write(n[:])
	f.WriteString(head)
	if err := f.Truncate(int64(8+len(head)) + mib<<20); err != nil {
		t.Fatal(err)
	}
}
