package main

import (
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/sys/cpu"

	"github.com/sdtool/sdtool/native"
)

// hostX86 maps the names native.LinkedX86 reports to this CPU's features.
var hostX86 = map[string]bool{
	"AVX": cpu.X86.HasAVX, "AVX2": cpu.X86.HasAVX2, "FMA": cpu.X86.HasFMA, "F16C": cpu.X86.HasF16C,
	"BMI2": cpu.X86.HasBMI2, "AVX512F": cpu.X86.HasAVX512F, "AVX512VNNI": cpu.X86.HasAVX512VNNI,
	"AVX512BF16": cpu.X86.HasAVX512BF16, "AVXVNNI": cpu.X86.HasAVXVNNI,
}

// checkCPU refuses to run a binary whose ggml was compiled for instructions
// this CPU lacks (a -march=x86-64-v3 release on an older CPU, or a
// -march=native build moved to another machine): ggml would die on an
// illegal instruction in the middle of the work, with no message.
func checkCPU() error {
	if runtime.GOARCH != "amd64" {
		return nil
	}
	return cpuMismatch(native.LinkedX86(), func(f string) bool { return hostX86[f] })
}

// cpuMismatch is checkCPU for the features linked and a host's has.
func cpuMismatch(linked []string, has func(string) bool) error {
	var missing []string
	for _, f := range linked {
		if !has(f) {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("this sdtool was built for CPUs with %s, and this CPU lacks %s: it would crash; "+
		"build one for this CPU from the repository with `go run ./build` (or use a build made without -march flags)",
		strings.Join(linked, ", "), strings.Join(missing, ", "))
}
