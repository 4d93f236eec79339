package quantize

import (
	"math"
	"strings"
	"testing"
)

// TestManifestIdenticalQuality: a rung whose images equal the source's
// (+Inf PSNR) is written as "psnr_db": null, "identical": true and read
// back as +Inf; JSON has no infinity, and the report failed on it after
// writing its page (issue 35, item 6).
func TestManifestIdenticalQuality(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	man := &Manifest{Schema: ManifestSchema, Source: ManifestSource{File: "m.gguf"}, Files: []ManifestFile{
		{File: "a.gguf", SHA256: sha, Quality: &Quality{PSNR: math.Inf(1), SSIM: 1, Images: 2}},
		{File: "b.gguf", SHA256: sha, Quality: &Quality{PSNR: 31.5, SSIM: 0.9, Images: 2}},
	}}
	b, err := EncodeManifest(man)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"psnr_db": null`, `"identical": true`, `"psnr_db": 31.5`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %s in %s", want, b)
		}
	}
	back, err := ParseManifest(b, "manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	if q := back.Files[0].Quality; !math.IsInf(q.PSNR, 1) || q.SSIM != 1 || q.Images != 2 {
		t.Errorf("identical rung read back as %+v", q)
	}
	if q := back.Files[1].Quality; q.PSNR != 31.5 || q.SSIM != 0.9 {
		t.Errorf("rung read back as %+v", q)
	}
}
