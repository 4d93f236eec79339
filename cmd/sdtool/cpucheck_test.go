package main

import (
	"strings"
	"testing"
)

func TestCPUMismatch(t *testing.T) {
	v3 := []string{"AVX", "AVX2", "FMA", "F16C", "BMI2"}
	sandyBridge := func(f string) bool { return f == "AVX" }
	all := func(string) bool { return true }
	err := cpuMismatch(v3, sandyBridge)
	if err == nil {
		t.Fatal("an x86-64-v3 build accepted a CPU without AVX2")
	}
	for _, want := range []string{"lacks AVX2, FMA, F16C, BMI2", "go run ./build"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if err := cpuMismatch(v3, all); err != nil {
		t.Errorf("a CPU with every feature: %v", err)
	}
	if err := cpuMismatch(nil, sandyBridge); err != nil {
		t.Errorf("a plain build (no features linked): %v", err)
	}
	// This test binary runs on this machine, so its own check must pass.
	if err := checkCPU(); err != nil {
		t.Errorf("checkCPU on the build machine: %v", err)
	}
}
