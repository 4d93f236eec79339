package t5

import (
	"math"
	"testing"
)

// TestT5BucketTable checks buckets worked out by hand from T5's rule (32
// buckets, max distance 128: exact below 8, then 8 + ⌊ln(a/8)/ln(16)·8⌋,
// keys after the query in the upper half).
func TestT5BucketTable(t *testing.T) {
	for _, c := range []struct {
		rel  int
		want int32
	}{
		{0, 0}, {-1, 1}, {-7, 7}, {1, 17}, {7, 23},
		{-8, 8}, {8, 24}, // ln(1) = 0
		{-16, 10}, {16, 26}, // ln 2 / ln 16 = 1/4, times 8 = 2
		{-32, 12}, {-64, 14}, // 1/2 and 3/4 of the way
		{-127, 15}, {-128, 15}, {-1000, 15}, {128, 31}, {5000, 31}, // clamped to the last bucket
		{-11, 8}, {-12, 9}, // ln 1.5 / ln 16 · 8 = 1.17
	} {
		if got := t5Bucket(c.rel, 32, 128); got != c.want {
			t.Errorf("bucket(%d) = %d, want %d", c.rel, got, c.want)
		}
	}
}

// TestT5BucketsProperties checks the bucket matrix against a float64
// version of the rule and T5's structure: query-major, the bucket depends
// only on key−query, buckets grow with distance on each side and stay in
// range.
func TestT5BucketsProperties(t *testing.T) {
	for _, nb := range []int{32, 16, 8} {
		const n, maxDist = 300, 128
		b := t5Buckets(n, nb, maxDist)
		if len(b) != n*n {
			t.Fatalf("%d buckets, want %d", len(b), n*n)
		}
		ref := func(rel int) int32 {
			half := nb / 2
			base := 0
			if rel > 0 {
				base = half
			}
			a := math.Abs(float64(rel))
			exact := half / 2
			if int(a) < exact {
				return int32(base + int(a))
			}
			v := exact + int(math.Log(a/float64(exact))/math.Log(float64(maxDist)/float64(exact))*float64(half-exact))
			return int32(base + min(v, half-1))
		}
		for q := 0; q < n; q++ {
			for k := 0; k < n; k++ {
				got := b[q*n+k]
				if got != ref(k-q) {
					t.Fatalf("%d buckets: query %d key %d: bucket %d, float64 rule gives %d", nb, q, k, got, ref(k-q))
				}
				if got < 0 || int(got) >= nb {
					t.Fatalf("%d buckets: bucket %d out of range", nb, got)
				}
			}
		}
		for rel := 1; rel < 2*n; rel++ {
			if t5Bucket(rel, nb, maxDist) < t5Bucket(rel-1, nb, maxDist) && rel-1 > 0 {
				t.Fatalf("%d buckets: bucket(%d) < bucket(%d)", nb, rel, rel-1)
			}
			if t5Bucket(-rel, nb, maxDist) < t5Bucket(-(rel-1), nb, maxDist) {
				t.Fatalf("%d buckets: bucket(%d) < bucket(%d)", nb, -rel, -(rel - 1))
			}
		}
	}
}
