//go:build !amd64 || purego

package quant

// Without assembly every search runs its scalar code.
var simdDetected = simdFlags{}

// qxLaneSums is qxLaneSumsGo.
func qxLaneSums(x, w, wx []float32, is *[qxLanes]float32, lo, hi int32, sumlx, suml2 *[qxLanes]float32, _ bool) {
	qxLaneSumsGo(x, w, wx, is, lo, hi, sumlx, suml2)
}
