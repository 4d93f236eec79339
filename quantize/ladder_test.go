package quantize

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// ladderTypes is the ladder plus the other ComfyUI types.
var ladderTypes = []string{"Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K", "int8_convrot", "int8", "fp8_e4m3", "nvfp4", "w4a8"}

// Every file of a ladder must be byte-identical to quantize run once for
// its type, with and without an imatrix (which only the GGUF rungs and
// nvfp4 use),
// and the manifest must describe the files as they are on disk.
func TestLadderMatchesSingleRuns(t *testing.T) {
	for _, c := range []struct {
		name    string
		imatrix []string
		ro      pipeline.Options
	}{
		{"default", nil, pipeline.Options{Threads: 2}},
		{"imatrix-small-chunks", []string{"../testdata/tiny-sd1.imatrix.dat"}, pipeline.Options{Threads: 3, MaxMemory: 256 << 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Input: tinyPath, Output: filepath.Join(dir, "ladder", "tiny-{type}.{ext}"), Imatrix: c.imatrix}
			if err := os.Mkdir(filepath.Join(dir, "ladder"), 0o755); err != nil {
				t.Fatal(err)
			}
			l, err := PlanLadder(&opts, ladderTypes)
			if err != nil {
				t.Fatal(err)
			}
			man, err := l.Run(context.Background(), c.ro)
			l.Close()
			if err != nil {
				t.Fatal(err)
			}
			if l.Manifest != filepath.Join(dir, "ladder", ManifestName) {
				t.Errorf("manifest at %s", l.Manifest)
			}
			read, err := ReadManifest(l.Manifest)
			if err != nil {
				t.Fatal(err)
			}
			if len(read.Files) != len(ladderTypes) || read.Source.Arch != "sd1" || read.Source.Weights == 0 {
				t.Fatalf("manifest: %+v", read)
			}
			for i, typ := range ladderTypes {
				f := read.Files[i]
				got, err := os.ReadFile(filepath.Join(dir, "ladder", f.File))
				if err != nil {
					t.Fatal(err)
				}
				if sum := sha256.Sum256(got); f.SHA256 != hex.EncodeToString(sum[:]) || f.Size != int64(len(got)) {
					t.Errorf("%s: manifest says %d bytes, sha256 %s; the file has %d bytes, %x", f.File, f.Size, f.SHA256, len(got), sum)
				}
				if f.Type != typ || f.SHA256 != man.Files[i].SHA256 {
					t.Errorf("files[%d] = %s %s, want %s", i, f.Type, f.File, typ)
				}
				single := filepath.Join(dir, "single-"+typ+"."+f.Format)
				o := Options{Input: tinyPath, Output: single, Type: typ}
				if f.Format == "gguf" || typ == "nvfp4" {
					o.Imatrix = c.imatrix
				}
				run(t, o, pipeline.Options{Threads: 1})
				want, err := os.ReadFile(single)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: the ladder's file (%d bytes) differs from quantize --type %s (%d bytes)", f.File, len(got), typ, len(want))
				}
			}
			// Bits per weight fall down the ladder's GGUF rungs.
			for i := 1; i < 6; i++ {
				if read.Files[i].BitsPerWeight > read.Files[i-1].BitsPerWeight {
					t.Errorf("%s has %.3f bits per weight, more than %s's %.3f", read.Files[i].Type, read.Files[i].BitsPerWeight, read.Files[i-1].Type, read.Files[i-1].BitsPerWeight)
				}
			}
			if !slices.Equal(read.Files[0].Loads, []string{"sdcpp", "comfyui", "ggml"}) && !slices.Equal(read.Files[0].Loads, []string{"sdcpp", "comfyui"}) {
				t.Errorf("Q8_0 loads in %v", read.Files[0].Loads)
			}
			// loads is the consumers the --target facts clear, and no other.
			for _, f := range read.Files {
				var ok []string
				for _, c := range f.Consumers {
					if c.OK {
						ok = append(ok, c.Name)
					}
				}
				if !slices.Equal(ok, f.Loads) || len(f.Consumers) != len(AllTargets) {
					t.Errorf("%s: loads %v, consumers %+v", f.File, f.Loads, f.Consumers)
				}
			}
			if !slices.Contains(read.Files[6].Loads, "comfyui") || slices.Contains(read.Files[6].Loads, "ggml") {
				t.Errorf("int8_convrot loads in %v", read.Files[6].Loads)
			}
			if slices.Contains(read.Files[8].Loads, "ggml") {
				t.Errorf("fp8_e4m3 loads in %v", read.Files[8].Loads)
			}
		})
	}
}

// An interrupted ladder leaves no file at all: no output, no partial, no manifest.
func TestLadderInterrupted(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Input: tinyPath, Output: filepath.Join(dir, "tiny-{type}.{ext}")}
	l, err := PlanLadder(&opts, ladderTypes)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = l.Run(ctx, pipeline.Options{Threads: 2, MaxMemory: 256 << 10, Progress: func(done, total int64) {
		if done > total/2 {
			cancel()
		}
	}})
	if !errors.Is(err, pipeline.ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		t.Errorf("left behind: %s", e.Name())
	}
}

// Ladder arguments that cannot work are refused before anything is written.
func TestLadderErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		typ, out, want string
	}{
		{"Q8_0,Q4_K_M", filepath.Join(dir, "x.gguf"), "needs {type}"},
		{"Q8_0,,Q4_K_M", filepath.Join(dir, "x-{type}.{ext}"), "empty item"},
		{"Q8_0,q8_0", filepath.Join(dir, "x-{type}.{ext}"), "listed twice"},
		{"Q8_0,Q9_K", filepath.Join(dir, "x-{type}.{ext}"), "Type Q9_K"},
		{"Q8_0,int8", filepath.Join(dir, "x-{type}.gguf"), "Type int8"},
	} {
		types, err := SplitTypes(c.typ)
		if err == nil {
			var l *Ladder
			l, err = PlanLadder(&Options{Input: tinyPath, Output: c.out}, types)
			if err == nil {
				l.Close()
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--type %s -o %s: err = %v, want %q", c.typ, c.out, err, c.want)
		}
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 0 {
		t.Errorf("%d files written", len(es))
	}
}

// FuzzParseManifest: any bytes are a manifest or an error, never a panic,
// and an accepted manifest names only files inside its folder.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"schema":"sdtool.ladder/1","source":{"file":"a"},"files":[{"file":"m.gguf","sha256":"` + hex.EncodeToString(make([]byte, 32)) + `"}]}`))
	f.Add([]byte(`{"schema":"sdtool.ladder/1","files":[{"file":"../x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b, "manifest.json")
		if err != nil {
			return
		}
		for _, file := range m.Files {
			if !filepath.IsLocal(filepath.FromSlash(file.File)) {
				t.Errorf("accepted file %q", file.File)
			}
		}
	})
}

// countingModel counts the bytes read of every tensor.
type countingModel struct {
	formats.Model
	mu   sync.Mutex
	read map[string]int64
}

func (c *countingModel) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	n, err := c.Model.ReadTensorAt(t, p, off)
	c.mu.Lock()
	c.read[t.Name] += int64(n)
	c.mu.Unlock()
	return n, err
}

// An INT8 module's weight_scale comes from the scales its weight's
// encoder found: each weight is read (and decoded) once.
func TestInt8DecodesOnce(t *testing.T) {
	m, err := formats.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cm := &countingModel{Model: m, read: map[string]int64{}}
	for _, typ := range []string{"int8_convrot", "int8"} {
		clear(cm.read)
		plan, rep, err := PlanModel(&Options{Output: filepath.Join(t.TempDir(), "x.safetensors"), Type: typ}, cm)
		if err != nil {
			t.Fatal(err)
		}
		if err := pipeline.Run(context.Background(), plan, pipeline.Options{Threads: 2, MaxMemory: 256 << 10}); err != nil {
			t.Fatal(err)
		}
		plan.Close()
		modules := 0
		for _, o := range plan.Outputs {
			if o.Source != nil && strings.HasSuffix(o.Name, ".weight") && o.Type == formats.I8 {
				modules++
				if got := cm.read[o.Source.Name]; got != o.Source.Size {
					t.Errorf("%s: %s read %d bytes of %d", typ, o.Source.Name, got, o.Source.Size)
				}
			}
		}
		if modules == 0 || rep.Format != "safetensors" {
			t.Fatalf("%s: %d INT8 weights planned", typ, modules)
		}
	}
}

// A manifest records the quality of a file whose images are identical to
// the source's (PSNR +Inf, which JSON cannot hold: null) and reads it back;
// sonic refused the infinity, so report lost the manifest of a ladder with
// a lossless rung.
func TestManifestQualityRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), ManifestName)
	man := &Manifest{Schema: ManifestSchema, Source: ManifestSource{File: "a.gguf"}, Files: []ManifestFile{
		{File: "f16.gguf", SHA256: strings.Repeat("0", 64), Loads: []string{}, Consumers: []Consumer{}, Quality: &Quality{PSNR: math.Inf(1), SSIM: 1, Images: 2, Report: "r.html"}},
		{File: "q4.gguf", SHA256: strings.Repeat("1", 64), Loads: []string{}, Consumers: []Consumer{}, Quality: &Quality{PSNR: 31.5, SSIM: 0.9, Images: 2}},
		{File: "bad.gguf", SHA256: strings.Repeat("2", 64), Loads: []string{}, Consumers: []Consumer{}, Quality: &Quality{Error: "truncated"}},
	}}
	if err := WriteManifest(context.Background(), path, man, pipeline.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `"psnr_db": null`) {
		t.Errorf("identical images not written as null:\n%s", raw)
	}
	back, err := ReadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range back.Files {
		if *f.Quality != *man.Files[i].Quality {
			t.Errorf("%s: read back %+v, wrote %+v", f.File, *f.Quality, *man.Files[i].Quality)
		}
	}
}
