//go:build cgo

package t5

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/quant/imatrix"
	"github.com/sdtool/sdtool/text"
)

// TestT5MatchesSDCLIImatrix compares the T5 encoder with stable-diffusion.cpp's
// inside one of its runs: sd-cli's imatrix holds, for every linear weight
// of its T5, the mean square of each input column over the tokens it
// encoded, so it sees the normed embeddings (q, k, v), the attention output
// (o, which the relative bias and softmax shape), the normed residual
// (wi_0, wi_1) and the gated product (wo) of every block. It needs an
// imatrix that sd-cli wrote for an empty prompt (</s> and padding to 256
// whatever its tokenizer) and the T5 file it ran, for example
//
//	sd-cli --diffusion-model DIT --clip_l CLIP --t5xxl T5 --vae VAE -p "" -W 64 -H 64 --steps 1 \
//	    --sampling-method euler --cfg-scale 1 -o out.png --imat-out sdcli-imat.gguf
//	SDTOOL_T5_FILE=T5 SDTOOL_T5_SDCLI_IMATRIX=sdcli-imat.gguf go test ./infer -run T5MatchesSDCLI
func TestT5MatchesSDCLIImatrix(t *testing.T) {
	file, imat := os.Getenv("SDTOOL_T5_FILE"), os.Getenv("SDTOOL_T5_SDCLI_IMATRIX")
	if file == "" || imat == "" {
		t.Skip("SDTOOL_T5_FILE and SDTOOL_T5_SDCLI_IMATRIX are not set (a T5 file and the imatrix sd-cli wrote running it)")
	}
	ref, err := imatrix.Open(imat)
	if err != nil {
		t.Fatal(err)
	}
	m := loadT5Component(t, file)
	s := infer.NewImatrixStats()
	m.SetImatrix(s)
	ids := make([]int32, text.FluxT5Length)
	ids[0] = 1 // </s>, then <pad>
	if _, err := EncodeT5(m, ids, nil); err != nil {
		t.Fatal(err)
	}
	ours := s.Matrix("")
	// sd-cli names its entries with the internal names (llama.cpp's GGUF
	// names converted), ours are the file's.
	internal := map[string]string{}
	for _, sp := range m.Specs {
		internal[sp.Src.Name] = sp.Name
	}
	compared := 0
	worst, worstName := 0.0, ""
	for _, e := range ours.Entries {
		name := internal[e.Name]
		g, ok := ref.Lookup(name)
		if !ok {
			t.Errorf("sd-cli's imatrix has no %s", name)
			continue
		}
		if len(g.Sum2) != len(e.Sum2) || len(g.Counts) != 1 {
			t.Errorf("%s: %d columns, sd-cli %d", name, len(e.Sum2), len(g.Sum2))
			continue
		}
		// Means per column: sd-cli may have encoded more than once.
		var d, mx float64
		for j := range e.Sum2 {
			a := float64(e.Sum2[j]) / float64(e.Counts[0])
			b := float64(g.Sum2[j]) / float64(g.Counts[0])
			d = math.Max(d, math.Abs(a-b))
			mx = math.Max(mx, math.Abs(b))
		}
		rel := d / mx
		if rel > worst {
			worst, worstName = rel, name
		}
		if rel > 1e-3 {
			t.Errorf("%s: mean squares differ from sd-cli's by %.3g (relative to their largest)", name, rel)
		}
		compared++
	}
	if want := 7 * T5(m.Config).Layers; compared != want {
		t.Errorf("compared %d weights, want %d", compared, want)
	}
	t.Logf("%d T5 weights against sd-cli: worst relative difference %.3g (%s)", compared, worst, worstName)
}

// BenchmarkT5Encode times one 256-token encoding of the T5 file in
// SDTOOL_T5_FILE (sd-cli's Flux chunk) with SDTOOL_T5_THREADS threads
// (default 2), to set beside sd-cli's "computing condition graph" time.
func BenchmarkT5Encode(b *testing.B) {
	file := os.Getenv("SDTOOL_T5_FILE")
	if file == "" {
		b.Skip("SDTOOL_T5_FILE is not set")
	}
	threads := 2
	if v := os.Getenv("SDTOOL_T5_THREADS"); v != "" {
		fmt.Sscan(v, &threads)
	}
	m := loadT5Component(b, file)
	m.SetThreads(threads)
	ids := make([]int32, text.FluxT5Length)
	ids[0] = 1
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := EncodeT5(m, ids, nil); err != nil {
			b.Fatal(err)
		}
	}
}
