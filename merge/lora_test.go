package merge

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

func TestParseAdapter(t *testing.T) {
	cases := []struct {
		in   string
		path string
		s    float64
		bad  bool
	}{
		{"style.safetensors", "style.safetensors", 1, false},
		{"style.safetensors:0.5", "style.safetensors", 0.5, false},
		{"style.safetensors:-1.25", "style.safetensors", -1.25, false},
		{`C:\loras\style.safetensors`, `C:\loras\style.safetensors`, 1, false},
		{`C:\loras\style.safetensors:2`, `C:\loras\style.safetensors`, 2, false},
		{"a:b:0.75", "a:b", 0.75, false},
		{"style.safetensors:NaN", "", 0, true},
		{"style.safetensors:inf", "", 0, true},
		{":0.5", "", 0, true},
		{"", "", 0, true},
	}
	for _, c := range cases {
		a, err := ParseAdapter(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("%q: accepted as %+v", c.in, a)
			}
			continue
		}
		if err != nil || a.Path != c.path || a.Strength != c.s {
			t.Errorf("%q: %+v, %v; want %q at %g", c.in, a, err, c.path, c.s)
		}
	}
}

// fluxPair writes a tiny BFL-named Flux base (bare names) with a fused qkv
// and a tuned copy whose qkv and proj differ, and returns their paths.
func fluxPair(t *testing.T, dir string) (string, string) {
	t.Helper()
	names := []struct {
		name  string
		shape []int64
	}{
		{"double_blocks.0.img_attn.qkv.weight", []int64{24, 8}},
		{"double_blocks.0.img_attn.proj.weight", []int64{8, 8}},
		{"double_blocks.0.img_attn.norm.key_norm.scale", []int64{8}},
		// Flux has single blocks too; the family table looks for both.
		{"single_blocks.0.norm.key_norm.scale", []int64{8}},
		{"img_in.weight", []int64{8, 16}},
	}
	var a, b []testTensor
	for i, n := range names {
		k := int(n.shape[0])
		if len(n.shape) > 1 {
			k *= int(n.shape[1])
		}
		va, vb := ramp(k, uint64(i+1)), ramp(k, uint64(i+1))
		if len(n.shape) == 2 && n.name != "img_in.weight" {
			d := ramp(k, uint64(100+i))
			for j := range vb {
				vb[j] += 0.1 * d[j]
			}
		}
		a = append(a, tF32(n.name, n.shape, va))
		b = append(b, tF32(n.name, n.shape, vb))
	}
	return write(t, filepath.Join(dir, "a.safetensors"), nil, a...), write(t, filepath.Join(dir, "b.safetensors"), nil, b...)
}

// extractTo runs an extraction to out with the given threads and returns
// the report.
func extractTo(t *testing.T, o ExtractOptions) *Extraction {
	t.Helper()
	e, err := OpenExtract(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	p, err := e.PlanOutput()
	if err != nil {
		t.Fatal(err)
	}
	if err := pipeline.Run(context.Background(), p, pipeline.Options{Threads: o.Threads, Force: true}); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestExtractFluxAndBake extracts a Flux pair (the unchanged img_in left
// out as unchanged, the fused qkv as kohya's one qkv layer) at full rank
// and bakes it back: B to float precision; the output does not depend on
// the thread count, and the spill file is gone after Close.
func TestExtractFluxAndBake(t *testing.T) {
	dir := t.TempDir()
	a, b := fluxPair(t, dir)
	out1, out2 := filepath.Join(dir, "l1.safetensors"), filepath.Join(dir, "l2.safetensors")
	e := extractTo(t, ExtractOptions{Base: a, Tuned: b, Output: out1, Rank: 8, Type: "f32", Threads: 1})
	extractTo(t, ExtractOptions{Base: a, Tuned: b, Output: out2, Rank: 8, Type: "f32", Threads: 3})
	x, _ := os.ReadFile(out1)
	y, _ := os.ReadFile(out2)
	if !bytes.Equal(x, y) {
		t.Error("the adapter depends on the thread count")
	}
	status := map[string]string{}
	for _, l := range e.Layers {
		status[l.Module] = l.Status
	}
	if status["lora_unet_double_blocks_0_img_attn_qkv"] != "extracted" || status["lora_unet_img_in"] != "unchanged" {
		t.Errorf("layers: %v", status)
	}
	e.Close()
	if left, _ := filepath.Glob(filepath.Join(dir, ".l1.safetensors.factors-*")); len(left) != 0 {
		t.Errorf("spill files left: %v", left)
	}
	bk, err := OpenBake(&BakeOptions{Base: a, Adapters: []Adapter{{Path: out1, Strength: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	baked := filepath.Join(dir, "baked.safetensors")
	p, err := bk.PlanOutput(baked, "")
	if err != nil {
		t.Fatal(err)
	}
	runPlan(t, p, 2, 0)
	got, _, gm := readAll(t, baked)
	defer gm.Close()
	want, _, wm := readAll(t, b)
	defer wm.Close()
	for name, w := range want {
		g, wv := floats(got[name].data), floats(w.data)
		for i := range wv {
			if math.Abs(float64(g[i]-wv[i])) > 1e-5 {
				t.Fatalf("%s[%d] = %v, want %v", name, i, g[i], wv[i])
			}
		}
	}
}

// TestExtractRefuses checks the options and inputs an extraction refuses.
func TestExtractRefuses(t *testing.T) {
	dir := t.TempDir()
	a, b := fluxPair(t, dir)
	other := write(t, filepath.Join(dir, "c.safetensors"), nil, tF32("double_blocks.0.img_attn.qkv.weight", []int64{12, 16}, ramp(192, 1)))
	out := filepath.Join(dir, "l.safetensors")
	for _, c := range []struct {
		o    ExtractOptions
		want []string
	}{
		{ExtractOptions{Base: a, Output: out, Rank: 4}, []string{"Tuned"}},
		{ExtractOptions{Base: a, Tuned: b, Output: out}, []string{"Rank", "Energy"}},
		{ExtractOptions{Base: a, Tuned: b, Output: out, Rank: 4, Energy: 0.5}, []string{"exclude"}},
		{ExtractOptions{Base: a, Tuned: b, Output: out, Energy: 1.5}, []string{"(0, 1]"}},
		{ExtractOptions{Base: a, Tuned: b, Output: out, Rank: 4, Type: "q8_0"}, []string{"f16, bf16 or f32"}},
		{ExtractOptions{Base: a, Tuned: other, Output: out, Rank: 4}, []string{"double_blocks.0.img_attn.qkv.weight", "[24 8]", "[12 16]"}},
	} {
		e, err := OpenExtract(&c.o)
		if err == nil {
			e.Close()
		}
		wantErr(t, err, c.want...)
	}
	// Equal checkpoints: planned, but nothing to write.
	e, err := OpenExtract(&ExtractOptions{Base: a, Tuned: a, Output: out, Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	_, err = e.PlanOutput()
	wantErr(t, err, "do not differ")
}

// TestExtractCancelled checks that a cancelled extraction stops and leaves
// no spill file once closed.
func TestExtractCancelled(t *testing.T) {
	dir := t.TempDir()
	a, b := fluxPair(t, dir)
	e, err := OpenExtract(&ExtractOptions{Base: a, Tuned: b, Output: filepath.Join(dir, "l.safetensors"), Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Run(ctx, nil); !errors.Is(err, pipeline.ErrInterrupted) || !strings.Contains(err.Error(), "nothing written") {
		t.Errorf("cancelled run: %v", err)
	}
	e.Close()
	if left, _ := filepath.Glob(filepath.Join(dir, ".l.safetensors.factors-*")); len(left) != 0 {
		t.Errorf("spill files left: %v", left)
	}
}

// TestBakeKeepsTypes checks PlanOutput: without a type every tensor keeps
// the base's (a GGUF output of a safetensors base too), with f16 the float
// tensors convert; a base type the output cannot store is refused.
func TestBakeKeepsTypes(t *testing.T) {
	dir := t.TempDir()
	a, b := fluxPair(t, dir)
	lora := filepath.Join(dir, "l.safetensors")
	extractTo(t, ExtractOptions{Base: a, Tuned: b, Output: lora, Rank: 2, Threads: 1})
	bk, err := OpenBake(&BakeOptions{Base: a, Adapters: []Adapter{{Path: lora, Strength: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	for _, c := range []struct {
		out, typ string
		want     formats.DType
	}{{"k.gguf", "", formats.F32}, {"h.safetensors", "f16", formats.F16}} {
		p, err := bk.PlanOutput(filepath.Join(dir, c.out), c.typ)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Outputs {
			if o.Type != c.want {
				t.Errorf("%s: %s is %s, want %s", c.out, o.Name, o.Type, c.want)
			}
		}
		if len(p.Inputs) != 2 {
			t.Errorf("%s: inputs %v, want the base and the adapter", c.out, p.Inputs)
		}
		p.Close()
	}
	if _, err := bk.PlanOutput(filepath.Join(dir, "x.safetensors"), "q8_0"); err == nil {
		t.Error("a quantized type accepted by the float plan")
	}
	if bk.Description() != "method=lora base=a.safetensors lora=l.safetensors:0.5" {
		t.Errorf("description %q", bk.Description())
	}
}

// FuzzParseAdapter checks that any --lora value parses without panicking
// into a file and a finite strength, or is refused.
func FuzzParseAdapter(f *testing.F) {
	for _, s := range []string{"a.safetensors", "a.safetensors:0.5", `C:\x.safetensors:-1`, "a:b:c", ":", "x:1e400", "x:NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAdapter(s)
		if err != nil {
			return
		}
		if a.Path == "" || math.IsNaN(a.Strength) || math.IsInf(a.Strength, 0) {
			t.Fatalf("%q parsed as %+v", s, a)
		}
		if a.Path != s && !strings.HasPrefix(s, a.Path+":") {
			t.Fatalf("%q: path %q is not its prefix", s, a.Path)
		}
	})
}
