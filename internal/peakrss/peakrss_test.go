package peakrss

import (
	"os"
	"testing"
)

const childEnv = "SDTOOL_PEAKRSS_CHILD"

// TestMeasureSeesAllocation checks the units end to end: a child that
// touches 96 MiB must report a peak of at least that many KiB.
func TestMeasureSeesAllocation(t *testing.T) {
	kb := Measure(t, "TestAllocatingChild", childEnv+"=1")
	if kb < 96<<10 {
		t.Errorf("peak %d KiB for a child that touched 96 MiB", kb)
	}
}

// sink keeps the child's allocation alive.
var sink []byte

// TestAllocatingChild is the child of TestMeasureSeesAllocation.
func TestAllocatingChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as a child of TestMeasureSeesAllocation")
	}
	sink = make([]byte, 96<<20)
	for i := range sink {
		sink[i] = byte(i)
	}
	Report(t)
}
