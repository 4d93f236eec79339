//go:build amd64 && !purego

package quant

import "golang.org/x/sys/cpu"

// The amd64 kernels need AVX2 (and the x86-64-v3 companions F16C, BMI1 and
// BMI2, which every AVX2 CPU has).
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasF16C && cpu.X86.HasBMI1 && cpu.X86.HasBMI2

// haveVector says that the row kernels of rows_asm.go can run.
var haveVector = haveAVX2

// haveAVX512 says that the AVX-512 kernels can run (with AVX2's).
var haveAVX512 = haveAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL

var simdDetected = simdFlags{qx: haveAVX2, qkx: haveAVX2, legacy: haveAVX2, floats: haveAVX2, wide: haveAVX512}

// qxLaneSumsAVX2 is qxLaneSumsGo for n >= 1 elements when every
// |num[k]/vmax·x[i]| is below 2^22, where adding and subtracting 1.5·2^23
// rounds exactly as nearest_int does.
//
//go:noescape
func qxLaneSumsAVX2(x, w *float32, n int, num *[qxLanes]float32, vmax, lo, hi float32, sumlx, suml2 *[qxLanes]float32)

// qxLaneSumsAVX512 is qxLaneSumsAVX2 with lanes 0-15 in one 512-bit
// register (a third fewer instructions).
//
//go:noescape
func qxLaneSumsAVX512(x, w *float32, n int, num *[qxLanes]float32, vmax, lo, hi float32, sumlx, suml2 *[qxLanes]float32)

// qxLaneSums is qxLaneSumsGo; fast says that every |num[k]/vmax·x[i]| is
// below 2^22.
func qxLaneSums(x, w []float32, num *[qxLanes]float32, vmax float32, lo, hi int32, sumlx, suml2 *[qxLanes]float32, fast bool) {
	n := len(x)
	switch {
	case !fast || !haveAVX2 || n == 0 || len(w) < n:
		qxLaneSumsGo(x, w, num, vmax, lo, hi, sumlx, suml2)
	case simd.wide && haveAVX512:
		qxLaneSumsAVX512(&x[0], &w[0], n, num, vmax, float32(lo), float32(hi), sumlx, suml2)
	default:
		qxLaneSumsAVX2(&x[0], &w[0], n, num, vmax, float32(lo), float32(hi), sumlx, suml2)
	}
}

// qkxLaneEvalAVX2 is qkxLaneEvalGo for 1 <= n <= 32 elements when every
// |iscale·xm[i]| is below 2^22 and no input is NaN.
//
//go:noescape
func qkxLaneEvalAVX2(x, w, xm *float32, n int, p *qkxParams, o *qkxLaneOut)

// qkxLaneEval is qkxLaneEvalGo; fast says that every |iscale·xm[i]| is
// below 2^22 and no input is NaN.
func qkxLaneEval(x, w, xm []float32, p *qkxParams, o *qkxLaneOut, fast bool) {
	n := len(x)
	if !fast || !haveAVX2 || n == 0 || n > 32 || len(w) < n || len(xm) < n {
		qkxLaneEvalGo(x, w, xm, p, o)
		return
	}
	qkxLaneEvalAVX2(&x[0], &w[0], &xm[0], n, p, o)
}
