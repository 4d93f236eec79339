package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// kernelInput fills x (Gaussian with outliers, some exact halves and
// integers, so that rounding ties occur) and w (positive, some zeros).
func kernelInput(r *rand.Rand, x, w []float32) {
	gaussRow(r, x)
	for i := range x {
		switch r.IntN(8) {
		case 0:
			x[i] = float32(r.IntN(33)-16) / 2
		case 1:
			x[i] = float32(r.IntN(9) - 4)
		}
		w[i] = float32(r.Float64() * 4)
		if r.IntN(6) == 0 {
			w[i] = 0
		}
	}
}

// The lane kernels in use (assembly where the CPU has it) give the bits of
// the portable Go kernels.
func TestQxLaneSumsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 101))
	for iter := range 3000 {
		n := 1 + r.IntN(32)
		if iter%2 == 0 {
			n = []int{16, 32}[iter/2%2]
		}
		nmax := []int32{4, 8, 16, 32}[r.IntN(4)]
		var x, w [32]float32
		kernelInput(r, x[:n], w[:n])
		var amax float32
		for i := range n {
			amax = max(amax, cFabs(x[i]))
		}
		var num [qxLanes]float32
		for k := range num {
			num[k] = float32(r.NormFloat64()) * float32(nmax)
			if k%5 == 0 {
				num[k] = 0.5 * float32(r.IntN(9)-4) // exact halves of the integer x
			}
		}
		vmax := max(amax, 1e-3)
		if r.IntN(2) == 0 {
			vmax = -vmax
		}
		if iter%7 == 0 {
			vmax = 1
		}
		var b1, b2 [qxLanes]float32
		qxLaneSumsGo(x[:n], w[:n], &num, vmax, -nmax, nmax-1, &b1, &b2)
		for _, wide := range []bool{false, true} {
			var a1, a2 [qxLanes]float32
			withKernels(simdFlags{wide: wide}, func() { qxLaneSums(x[:n], w[:n], &num, vmax, -nmax, nmax-1, &a1, &a2, true) })
			for k := range a1 {
				if math.Float32bits(a1[k]) != math.Float32bits(b1[k]) || math.Float32bits(a2[k]) != math.Float32bits(b2[k]) {
					t.Fatalf("wide=%v n=%d nmax=%d lane %d (num %g, vmax %g): kernel sums %g %g, Go %g %g", wide, n, nmax, k, num[k], vmax, a1[k], a2[k], b1[k], b2[k])
				}
			}
		}
	}
}

func TestQkxLaneEvalMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 102))
	fastRuns := 0
	for iter := range 3000 {
		n := []int{16, 32, 1 + r.IntN(32)}[iter%3]
		var x, w, xm [32]float32
		kernelInput(r, x[:n], w[:n])
		vmin, vmax := x[0], x[0]
		var sumW, sumX float32
		for i := range n {
			vmin, vmax = min(vmin, x[i]), max(vmax, x[i])
			sumW += w[i]
			sumX += float32(w[i] * x[i])
		}
		vmin = min(vmin, 0) - float32(r.Float64())*float32(iter%2) // sometimes an offset below the minimum
		if vmax == vmin {
			continue // makeQkxQuants returns before any candidate
		}
		var xmMax float32
		for i := range n {
			xm[i] = x[i] - vmin
			xmMax = max(xmMax, cFabs(xm[i]))
		}
		p := qkxParams{
			is0: float32(r.IntN(30)), rmin: -float32(r.Float64()), rdelta: []float32{0.1, 0.05}[r.IntN(2)],
			nmax: []float32{3, 15, 31}[r.IntN(3)], span: vmax - vmin, sumW: sumW, sumX: sumX, mad: uint32(r.IntN(2)),
		}
		if iter%11 == 0 {
			p.sumW = 0 // singular normal equations in some lanes
		}
		if iter%3 == 1 {
			// Lane 0 as the search's first candidate.
			p.init, p.is0 = 1, p.is0-1
			p.iscale0 = p.nmax / p.span
			p.s0, p.m0 = 1/p.iscale0, vmin
		}
		// The kernels' precondition, as makeQkxQuantsLanes tests it.
		top := (p.rmin + float32(p.rdelta*(p.is0+qkxLanes-1)) + p.nmax) / p.span
		fast := float32(max(cFabs(top), cFabs(p.iscale0))*xmMax) < roundLimit
		if fast {
			fastRuns++
		}
		var a, b qkxLaneOut
		qkxLaneEval(x[:n], w[:n], xm[:n], &p, &a, fast)
		qkxLaneEvalGo(x[:n], w[:n], xm[:n], &p, &b)
		for k := range qkxLanes {
			for name, pair := range map[string][2]float32{"err": {a.err[k], b.err[k]}, "s": {a.s[k], b.s[k]}, "m": {a.m[k], b.m[k]}} {
				if math.Float32bits(pair[0]) != math.Float32bits(pair[1]) {
					t.Fatalf("iter %d n=%d %+v lane %d: kernel %s %g, Go %g", iter, n, p, k, name, pair[0], pair[1])
				}
			}
			for i := range n {
				if a.lv[i][k] != b.lv[i][k] {
					t.Fatalf("iter %d lane %d element %d: kernel level %g, Go %g", iter, k, i, a.lv[i][k], b.lv[i][k])
				}
			}
		}
	}
	if fastRuns < 2000 {
		t.Fatalf("only %d of 3000 inputs took the kernels' fast path", fastRuns)
	}
}

// The legacy row kernels give the scalar code's bytes, on Gaussian rows
// and on rows whose blocks hit every condition that hands a block back to
// the scalar code (NaN, Inf, ±0 extremes, subnormal scales, zero blocks).
func TestLegacyRowKernelsMatchScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(harnessSeed, 103))
	const nb = 64
	src := make([]float32, 32*nb)
	for iter := range 40 {
		gaussRow(r, src)
		for b := range nb {
			blk := src[32*b : 32*b+32]
			switch (iter + b) % 13 {
			case 0:
				blk[r.IntN(32)] = float32(math.NaN())
			case 1:
				blk[r.IntN(32)] = float32(math.Inf(1 - 2*r.IntN(2)))
			case 2:
				clear(blk)
			case 3:
				for i := range blk {
					blk[i] = math.Float32frombits(r.Uint32() & 0x807fffff) // subnormals
				}
			case 4:
				for i := range blk {
					blk[i] = float32(math.Abs(float64(blk[i]))) // minimum may be 0
				}
				blk[r.IntN(32)] = float32(math.Copysign(0, float64(1-2*r.IntN(2))))
			case 5:
				for i := range blk {
					blk[i] = float32(r.IntN(17) - 8) // ties
				}
			case 6:
				for i := range blk {
					blk[i] *= 1e30
				}
			}
		}
		for _, typ := range []formats.DType{formats.Q8_0, formats.Q4_0, formats.Q5_0, formats.Q4_1, formats.Q5_1} {
			c, _ := Lookup(typ)
			rb, _ := typ.RowBytes(int64(len(src)))
			want, got := make([]byte, rb), make([]byte, rb)
			withKernels(simdFlags{}, func() { c.Quantize(want, src, nil) })
			withKernels(simdFlags{legacy: true}, func() { c.Quantize(got, src, nil) })
			bb := typ.Info().BlockBytes
			for b := range nb {
				if string(got[b*bb:(b+1)*bb]) != string(want[b*bb:(b+1)*bb]) {
					t.Fatalf("%s iter %d block %d: kernel % x, scalar % x\nx: %v", typ, iter, b, got[b*bb:(b+1)*bb], want[b*bb:(b+1)*bb], src[32*b:32*b+32])
				}
			}
		}
	}
}
