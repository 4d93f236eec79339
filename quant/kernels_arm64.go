//go:build arm64 && !purego

package quant

//go:generate go run ./internal/genneon/main.go -o kernels_arm64.s

// Every arm64 CPU has NEON (Advanced SIMD), which the kernels need.
var simdDetected = simdFlags{qx: true, qkx: true, legacy: true, floats: true}

// haveVector says that the row kernels of rows_asm.go can run.
const haveVector = true

// qxLaneSumsNEON is qxLaneSumsGo for n >= 1 elements when every
// |num[k]/vmax·x[i]| is below 2^22.
//
//go:noescape
func qxLaneSumsNEON(x, w *float32, n int, num *[qxLanes]float32, vmax, lo, hi float32, sumlx, suml2 *[qxLanes]float32)

// qxLaneSums is qxLaneSumsGo; fast says that every |num[k]/vmax·x[i]| is
// below 2^22.
func qxLaneSums(x, w []float32, num *[qxLanes]float32, vmax float32, lo, hi int32, sumlx, suml2 *[qxLanes]float32, fast bool) {
	n := len(x)
	if !fast || n == 0 || len(w) < n {
		qxLaneSumsGo(x, w, num, vmax, lo, hi, sumlx, suml2)
		return
	}
	qxLaneSumsNEON(&x[0], &w[0], n, num, vmax, float32(lo), float32(hi), sumlx, suml2)
}

// qkxLaneEvalNEON is qkxLaneEvalGo for 1 <= n <= 32 elements when every
// |iscale·xm[i]| is below 2^22 and no input is NaN.
//
//go:noescape
func qkxLaneEvalNEON(x, w, xm *float32, n int, p *qkxParams, o *qkxLaneOut)

// qkxLaneEval is qkxLaneEvalGo; fast says that every |iscale·xm[i]| is
// below 2^22 and no input is NaN.
func qkxLaneEval(x, w, xm []float32, p *qkxParams, o *qkxLaneOut, fast bool) {
	n := len(x)
	if !fast || n == 0 || n > 32 || len(w) < n || len(xm) < n {
		qkxLaneEvalGo(x, w, xm, p, o)
		return
	}
	qkxLaneEvalNEON(&x[0], &w[0], &xm[0], n, p, o)
}
