package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/internal/synth"
)

// TestWanGGUFSDCLI holds sdtool's Wan GGUFs to stable-diffusion.cpp's
// reader and converter (SDTOOL_SDCLI) on the tiny Wan as one file (DiT,
// UMT5 and VAE under sd.cpp's prefixes, F16, 5-D Conv3d kernels): convert
// writes sd-cli's bytes (kernels folded to [out·in, t, h, w]); and the
// files quantize and merge write from a GGUF that carries the UMT5
// tokenizer as metadata arrays are read by sd-cli with every tensor in the
// shape of sd-cli's own conversion. sd-cli's fallback reader, the only one
// of its two that takes 5-D, stops at any array, so a kernel left 5-D
// there makes the file unreadable, as the source itself is.
func TestWanGGUFSDCLI(t *testing.T) {
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		t.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	longtest.Skip(t, "Wan GGUFs through sd-cli's reader (about 10 sd-cli runs)")
	dir := t.TempDir()
	wan := synth.TinyWan
	wan.Quant = 0 // an F16 release, as people convert
	single, withArrays := filepath.Join(dir, "wan.safetensors"), filepath.Join(dir, "wan-5d.gguf")
	for _, path := range []string{single, withArrays} {
		if err := wan.WriteSingle(path); err != nil {
			t.Fatal(err)
		}
	}
	sdcli := func(args ...string) error {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"-M", "convert"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("sd-cli %v: %v\n%s", args, err, tail(out, 2000))
		}
		return nil
	}
	sdtool := func(args ...string) {
		t.Helper()
		if code, _, stderr := runApp(t, args...); code != 0 {
			t.Fatalf("sdtool %v: exit %d: %s", args, code, stderr)
		}
	}
	for _, typ := range []string{"f16", "q8_0", "q4_K"} {
		want, got := filepath.Join(dir, "sdcli-"+typ+".gguf"), filepath.Join(dir, "sdtool-"+typ+".gguf")
		if err := sdcli("-m", single, "--type", typ, "-o", want); err != nil {
			t.Fatal(err)
		}
		sdtool("convert", "--no-metadata", "-m", single, "--type", typ, "-o", got)
		a, _ := os.ReadFile(want)
		b, _ := os.ReadFile(got)
		if !bytes.Equal(a, b) {
			t.Errorf("convert --type %s: %d bytes, sd-cli wrote %d", typ, len(b), len(a))
		}
	}
	if sdcli("-m", withArrays, "--type", "f16", "-o", filepath.Join(dir, "refused.gguf")) == nil {
		t.Error("sd-cli read a 5-D GGUF with metadata arrays: the premise of this test is gone")
	}

	ref := filepath.Join(dir, "sdcli-f16.gguf") // sd-cli's own shapes for every tensor
	for _, c := range []struct {
		name string
		args []string
	}{
		{"quantize Q4_K_M", []string{"quantize", "--type", "Q4_K_M", withArrays}},
		{"quantize q8_0", []string{"quantize", "--type", "q8_0", withArrays}},
		{"merge", []string{"merge", "--method", "weighted_sum", "-a", withArrays, "-b", withArrays, "--alpha", "0.3"}},
	} {
		out := filepath.Join(dir, "made.gguf")
		sdtool(append(c.args, "-o", out, "--force")...)
		back := filepath.Join(dir, "back.gguf")
		if err := sdcli("-m", out, "--type", "f16", "-o", back); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := shapeDiff(t, ref, back); diff != "" {
			t.Errorf("%s: sd-cli read the file with other shapes than its own conversion: %s", c.name, diff)
		}
		os.Remove(back)
	}
}

// shapeDiff names the first tensor whose stored shape differs between two
// GGUFs, or the first one missing; "" when they agree.
func shapeDiff(t *testing.T, a, b string) string {
	t.Helper()
	shapes := func(path string) map[string][]int64 {
		m, err := formats.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		out := map[string][]int64{}
		for _, ts := range m.Tensors() {
			out[ts.Name] = ts.Shape
		}
		return out
	}
	sa, sb := shapes(a), shapes(b)
	for name, s := range sa {
		if !slices.Equal(s, sb[name]) {
			return fmt.Sprintf("%s: %v against %v", name, s, sb[name])
		}
	}
	if len(sa) != len(sb) {
		return "tensor counts differ"
	}
	return ""
}
