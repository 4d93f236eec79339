//go:build (!amd64 && !arm64) || purego

package quant

// Without assembly every search runs its scalar code.
var simdDetected = simdFlags{}

// qxLaneSums is qxLaneSumsGo.
func qxLaneSums(x, w []float32, num *[qxLanes]float32, vmax float32, lo, hi int32, sumlx, suml2 *[qxLanes]float32, _ bool) {
	qxLaneSumsGo(x, w, num, vmax, lo, hi, sumlx, suml2)
}

// qkxLaneEval is qkxLaneEvalGo.
func qkxLaneEval(x, w, xm []float32, p *qkxParams, o *qkxLaneOut, _ bool) {
	qkxLaneEvalGo(x, w, xm, p, o)
}
