package quant

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// kquantTypes are the codecs of kquants*.go and iq4xs.go.
var kquantTypes = []formats.DType{formats.Q2_K, formats.Q3_K, formats.Q4_K, formats.Q5_K, formats.Q6_K, formats.IQ4_XS}

// kquantGoldenInput is a fixed input for the golden digests: 8 rows of 512
// roughly Gaussian values (a few twelve times larger) and an importance
// vector spanning 1/64..64. It is built from integer randomness with exact
// float operations only (math/rand's NormFloat64 and math.Pow may round
// differently across platforms), so it is the same everywhere.
func kquantGoldenInput() (src []float32, nPerRow int, weights []float32) {
	const n, rows = 512, 8
	r := rand.New(rand.NewPCG(0x6b71, 0x7561))
	src = make([]float32, n*rows)
	for i := range src {
		// A sum of 12 uniform 20-bit integers minus its mean (Irwin-Hall,
		// variance 1 in units of 2^20) is exact in float32.
		var s int32
		for range 12 {
			s += int32(r.Uint32() >> 12)
		}
		v := float32(s-6<<20) * 0x1p-20
		if i%97 == 0 {
			v *= 12
		}
		src[i] = v
	}
	weights = make([]float32, n)
	for i := range weights {
		weights[i] = float32(1+r.IntN(4096)) / 64
	}
	return src, n, weights
}

// kquantGolden holds the SHA-256 of ggml_quantize_chunk's bytes for
// kquantGoldenInput, without ("ref") and with the importance vector
// ("imatrix"). TestKQuantGoldenIsGGML (cgo) checks them against the linked
// ggml; here they let a build without cgo, or on a platform where Go may
// fuse multiply-adds, prove that it still writes ggml's bytes.
var kquantGolden = map[string]string{
	"q2_K/ref":       "f148c7c872bec736758a328a738ccf3bb6e77bc0fcf98ee8a8740363b23b75c6",
	"q2_K/imatrix":   "cdd0141c0efbddb0dcbd9b5e29320f433a7fc7319430218d737e7bc5ea8c71e1",
	"q3_K/ref":       "bf1e3fb22df764deb5491f4d4be2f7245b35fdcf5f157f5a9620d50068690afd",
	"q3_K/imatrix":   "a8f1814e4f172e163e22e11bfca957fdc50f526267fab8164b43eb4f7d81cdf6",
	"q4_K/ref":       "b5e8b0e937b999354416586f7ff1641210071fc7c558295617016815089dfa96",
	"q4_K/imatrix":   "d9ab2b1e6b6524ac73de3048bdb7e5989b193aa17439fb46113898707dd9d019",
	"q5_K/ref":       "8e9b22d5b906de14508ade797172c2019e74bb3addc35a687b196f88b0c99020",
	"q5_K/imatrix":   "d2a1863631035d801576a478acd9e5d0ee08af815760490cb3322d07b6c19f54",
	"q6_K/ref":       "173a948d5caef19b9c2e09910224fc1177d15a87ad3a903d8e89e0662a37a849",
	"q6_K/imatrix":   "725cd0beddc8ba7e3876a2a36ebd549c9455d62108f4e4e790318c600ca6c219",
	"iq4_xs/ref":     "e44557e10eb0b005014c9655f7327a81c6a6316e99e0701a4eef9f18f3b0b7d8",
	"iq4_xs/imatrix": "68ae651e6ef4e8d5ac0aef7534fe44c640c41572246ca71c4b3d442992718b23",
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestKQuantGolden(t *testing.T) {
	src, n, w := kquantGoldenInput()
	for _, typ := range kquantTypes {
		rb, _ := typ.RowBytes(int64(n))
		for _, path := range []string{"ref", "imatrix"} {
			weights := w
			if path == "ref" {
				weights = nil
			}
			dst := make([]byte, int(rb)*len(src)/n)
			if err := QuantizeRows(typ, dst, src, n, weights, 1); err != nil {
				t.Fatal(err)
			}
			key := typ.String() + "/" + path
			if got := digest(dst); got != kquantGolden[key] {
				t.Errorf("%s: digest %s, want ggml's %s", key, got, kquantGolden[key])
			}
		}
	}
}

// rmse returns the root-mean-square difference of a and b.
func rmse(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s / float64(len(a)))
}

// roundTrip quantizes src as typ (rows of n) and decodes it again.
func roundTrip(t *testing.T, typ formats.DType, src []float32, n int, weights []float32) []float32 {
	t.Helper()
	rb, err := typ.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	q := make([]byte, int(rb)*len(src)/n)
	if err := QuantizeRows(typ, q, src, n, weights, 2); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, len(src))
	if err := DequantizeRows(typ, back, q, 2); err != nil {
		t.Fatal(err)
	}
	return back
}

// On N(0,1) data the round-trip error must grow as the bits shrink
// (q8_0 < q6_K < q5_K < q4_K < q3_K < q2_K) and sit in the usual band for
// each type, on both paths; iq4_xs (4.25 bits) lies between q5_K and q3_K.
func TestKQuantRoundTripErrorOrder(t *testing.T) {
	const n, rows = 4096, 8
	r := rand.New(rand.NewPCG(11, 12))
	src := make([]float32, n*rows)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	// RMSE bands for unit Gaussians around what ggml's codecs give (about
	// 0.004, 0.018, 0.036, 0.071, 0.15, 0.28 and 0.077 for iq4_xs).
	bands := map[formats.DType][2]float64{
		formats.Q8_0: {0.002, 0.008}, formats.Q6_K: {0.012, 0.024}, formats.Q5_K: {0.025, 0.05},
		formats.Q4_K: {0.05, 0.1}, formats.Q3_K: {0.1, 0.2}, formats.Q2_K: {0.2, 0.4},
		formats.IQ4_XS: {0.05, 0.1},
	}
	order := []formats.DType{formats.Q8_0, formats.Q6_K, formats.Q5_K, formats.Q4_K, formats.Q3_K, formats.Q2_K}
	if !CanQuantize(formats.Q8_0) {
		order = order[1:]
	}
	for _, ws := range []weightSet{{"ref", nil}, {"ones", ones}} {
		errs := map[formats.DType]float64{}
		for _, typ := range append(order, formats.IQ4_XS) {
			errs[typ] = rmse(src, roundTrip(t, typ, src, n, ws.vec))
			if b := bands[typ]; errs[typ] < b[0] || errs[typ] > b[1] {
				t.Errorf("%s/%s: rmse %.4f outside [%g, %g]", typ, ws.name, errs[typ], b[0], b[1])
			}
		}
		for i := 1; i < len(order); i++ {
			if a, b := order[i-1], order[i]; !(errs[a] < errs[b]) {
				t.Errorf("%s: rmse of %s (%.4f) is not below %s (%.4f)", ws.name, a, errs[a], b, errs[b])
			}
		}
		if e := errs[formats.IQ4_XS]; !(e > errs[formats.Q5_K] && e < errs[formats.Q3_K]) {
			t.Errorf("%s: iq4_xs rmse %.4f not between q5_K %.4f and q3_K %.4f", ws.name, e, errs[formats.Q5_K], errs[formats.Q3_K])
		}
	}
}

// The weighted path must spend its precision where the importance is: with
// importance spanning four decades, the importance-weighted error is lower
// than the unweighted path's.
func TestKQuantWeightsLowerWeightedError(t *testing.T) {
	const n, rows = 2048, 8
	r := rand.New(rand.NewPCG(13, 14))
	src := make([]float32, n*rows)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(math.Pow(10, 4*r.Float64()-2))
	}
	werr := func(back []float32) float64 {
		var s float64
		for i := range back {
			d := float64(back[i]) - float64(src[i])
			s += float64(w[i%n]) * d * d
		}
		return s
	}
	for _, typ := range kquantTypes {
		plain, weighted := werr(roundTrip(t, typ, src, n, nil)), werr(roundTrip(t, typ, src, n, w))
		if !(weighted < plain) {
			t.Errorf("%s: weighted error %.4g with importance, %.4g without", typ, weighted, plain)
		}
	}
}

// All-zero rows decode to zeros on both paths (q6_K's levels are offset by
// -32, so like ggml it gives -0).
func TestKQuantZeroRows(t *testing.T) {
	src := make([]float32, 1024)
	ones := make([]float32, 1024)
	for i := range ones {
		ones[i] = 1
	}
	for _, typ := range kquantTypes {
		for _, w := range [][]float32{nil, ones} {
			for i, v := range roundTrip(t, typ, src, 1024, w) {
				if v != 0 {
					t.Fatalf("%s: element %d of a zero row decodes to %g", typ, i, v)
				}
			}
		}
	}
}

// Super-blocks are independent: a block encodes the same inside a row as
// alone, so NaN, Inf or outliers elsewhere cannot leak into it.
func TestKQuantBlocksIndependent(t *testing.T) {
	const n = 1024
	r := rand.New(rand.NewPCG(15, 16))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	src[3] = float32(math.NaN())
	src[300] = float32(math.Inf(-1))
	src[600] = 1e30
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(r.Float64())
	}
	for _, typ := range kquantTypes {
		c, _ := Lookup(typ)
		bb := typ.Info().BlockBytes
		for _, weights := range [][]float32{nil, w} {
			whole := make([]byte, 4*bb)
			c.Quantize(whole, src, weights)
			for b := range 4 {
				one := make([]byte, bb)
				var wb []float32
				if weights != nil {
					wb = weights[b*256 : (b+1)*256]
				}
				c.Quantize(one, src[b*256:(b+1)*256], wb)
				if string(one) != string(whole[b*bb:(b+1)*bb]) {
					t.Errorf("%s (weights %v): block %d differs alone and in its row", typ, weights != nil, b)
				}
			}
		}
	}
}

// The codecs keep no shared state: concurrent calls give the bytes of a
// single call (run with -race to check for data races too).
func TestKQuantConcurrent(t *testing.T) {
	src, n, w := kquantGoldenInput()
	for _, typ := range kquantTypes {
		c, _ := Lookup(typ)
		rb, _ := typ.RowBytes(int64(n))
		rows := len(src) / n
		encode := func(dst []byte) {
			for r := range rows {
				c.Quantize(dst[r*int(rb):(r+1)*int(rb)], src[r*n:(r+1)*n], w)
			}
		}
		want := make([]byte, int(rb)*rows)
		encode(want)
		var wg sync.WaitGroup
		got := make([][]byte, 4)
		for g := range got {
			got[g] = make([]byte, len(want))
			wg.Add(1)
			go func() {
				defer wg.Done()
				encode(got[g])
			}()
		}
		wg.Wait()
		for g := range got {
			if string(got[g]) != string(want) {
				t.Errorf("%s: goroutine %d wrote different bytes", typ, g)
			}
		}
	}
}

// Weights change the output (UsesWeights is true for every k-quant).
func TestKQuantWeightsMatter(t *testing.T) {
	src, n, w := kquantGoldenInput()
	for _, typ := range kquantTypes {
		c, _ := Lookup(typ)
		if !c.UsesWeights {
			t.Errorf("%s: UsesWeights is false", typ)
		}
		rb, _ := typ.RowBytes(int64(n))
		a, b := make([]byte, rb), make([]byte, rb)
		c.Quantize(a, src[:n], nil)
		c.Quantize(b, src[:n], w)
		if string(a) == string(b) {
			t.Errorf("%s: importance weights did not change the bytes", typ)
		}
	}
}

// bisectIQ4 is ggml's best_index_int8 on the iq4_nl levels, transcribed
// literally, as the reference for bestIndexIQ4's branch-free search.
func bisectIQ4(x float32) uint8 {
	v := iq4nlValues
	if x <= float32(v[0]) {
		return 0
	}
	if x >= float32(v[15]) {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(v[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(v[mu-1]) < float32(v[mu])-x {
		return uint8(mu - 1)
	}
	return uint8(mu)
}

func TestBestIndexIQ4MatchesBisection(t *testing.T) {
	var xs []float32
	// Every level and midpoint with its float neighbours, the extremes and
	// NaN, then random values in and around the range and random bits.
	for i, v := range iq4nlValues {
		pts := []float32{float32(v)}
		if i < 15 {
			pts = append(pts, (float32(v)+float32(iq4nlValues[i+1]))/2)
		}
		for _, p := range pts {
			xs = append(xs, p, math.Nextafter32(p, -1000), math.Nextafter32(p, 1000))
		}
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e30, -1e30)
	r := rand.New(rand.NewPCG(17, 18))
	for range 200000 {
		xs = append(xs, float32(300*r.Float64()-150), math.Float32frombits(r.Uint32()))
	}
	// Every float within 4096 ulps of a level or a midpoint.
	for i, v := range iq4nlValues {
		pts := []float32{float32(v)}
		if i < 15 {
			pts = append(pts, (float32(v)+float32(iq4nlValues[i+1]))/2)
		}
		for _, p := range pts {
			lo, hi := p, p
			for range 4096 {
				lo, hi = math.Nextafter32(lo, -1000), math.Nextafter32(hi, 1000)
				xs = append(xs, lo, hi)
			}
		}
	}
	check := func(x float32) {
		want := bisectIQ4(x)
		if got := bestIndexIQ4(x); got != want {
			t.Fatalf("bestIndexIQ4(%v = %#08x) = %d, ggml's bisection gives %d", x, math.Float32bits(x), got, want)
		}
		if cFabs(x) < 256 {
			if got := iq4Level(x); got != float32(iq4nlValues[want]) {
				t.Fatalf("iq4Level(%v = %#08x) = %v, ggml's bisection gives level %d", x, math.Float32bits(x), got, iq4nlValues[want])
			}
		}
	}
	for _, x := range xs {
		check(x)
	}
	if os.Getenv("SDTOOL_EXHAUSTIVE") != "" {
		// Every float32 bit pattern (about a minute).
		for b := uint64(0); b < 1<<32; b++ {
			check(math.Float32frombits(uint32(b)))
		}
	}
}

// TestNoFusedMultiplyAdd cross-compiles this package for arm64, where
// Go may fuse a*b+c into one instruction, and for amd64 at x86-64-v3, and
// fails on any fused multiply-add in a function of the codec files (every
// non-test Go and assembly file of package quant): ggml's bytes come from
// unfused arithmetic. Products reach additions in non-obvious ways
// (through inlined helpers, across statements, or from x/256 rewritten as
// x*2^-8), so this looks at the machine code, which also covers the
// assembly kernels. It needs the go command and runs only when
// SDTOOL_FMA_CHECK is set.
func TestNoFusedMultiplyAdd(t *testing.T) {
	if os.Getenv("SDTOOL_FMA_CHECK") == "" {
		t.Skip("set SDTOOL_FMA_CHECK=1 to check the arm64 and amd64 code for fused multiply-adds")
	}
	for _, target := range []struct {
		goarch string
		env    []string
		fused  *regexp.Regexp
	}{
		// Scalar FMADD/FMSUB/FNMADD/FNMSUB and the vector FMLA/FMLS (VFMLA/VFMLS in Go syntax).
		{"arm64", nil, regexp.MustCompile(`\b(F(N?MADD|N?MSUB)[SD]|V?FML[AS])\b`)},
		{"amd64", []string{"GOAMD64=v3"}, regexp.MustCompile(`\bVFN?M(ADD|SUB)`)},
	} {
		t.Run(target.goarch, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "quant-"+target.goarch+".test")
			build := exec.Command("go", "test", "-c", "-o", bin, ".")
			build.Env = append(append(os.Environ(), "GOARCH="+target.goarch, "CGO_ENABLED=0"), target.env...)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("cross-compiling for %s: %v\n%s", target.goarch, err, out)
			}
			dump, err := exec.Command("go", "tool", "objdump", bin).Output()
			if err != nil {
				t.Fatalf("objdump: %v", err)
			}
			codecFile := regexp.MustCompile(`/quant/[a-z0-9_]+\.(go|s)$`)
			var fn string
			inCodec, found, asmFuncs := false, 0, 0
			sc := bufio.NewScanner(bytes.NewReader(dump))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, "TEXT "); ok {
					f := strings.Fields(rest)
					fn = f[0]
					inCodec = len(f) > 1 && codecFile.MatchString(f[1]) && !strings.HasSuffix(f[1], "_test.go")
					if inCodec && strings.HasSuffix(f[1], ".s") {
						asmFuncs++
					}
					continue
				}
				if inCodec && target.fused.MatchString(line) {
					found++
					t.Errorf("%s: %s", fn, strings.Join(strings.Fields(line), " "))
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d fused multiply-adds in the codecs (%d assembly functions checked)", found, asmFuncs)
		})
	}
}
