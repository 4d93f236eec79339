package names

import (
	"fmt"
	"testing"
)

// The original (BFL) Flux.1 layout, written down from the model's modules
// (q/k/v parts of the fused projections carry sd.cpp's ".1"/".2"/".3"
// suffixes, as its converter names them before fusing at load time).
func fluxBFLNames() []string {
	var l nameList
	p := "model.diffusion_model."
	l.wb(p, "img_in", "txt_in", "final_layer.linear", "final_layer.adaLN_modulation.1")
	for _, emb := range []string{"time_in", "vector_in", "guidance_in"} {
		l.wb(p+emb+".", "in_layer", "out_layer")
	}
	for i := 0; i < 19; i++ {
		b := fmt.Sprintf("%sdouble_blocks.%d.", p, i)
		for _, s := range []string{"img", "txt"} {
			l.wb(b, s+"_mod.lin", s+"_attn.proj", s+"_mlp.0", s+"_mlp.2")
			l.add(b+s+"_attn.qkv.", "weight", "bias", "weight.1", "bias.1", "weight.2", "bias.2")
			l.add(b+s+"_attn.norm.", "query_norm.scale", "key_norm.scale")
		}
	}
	for i := 0; i < 38; i++ {
		b := fmt.Sprintf("%ssingle_blocks.%d.", p, i)
		l.wb(b, "modulation.lin", "linear2")
		l.add(b+"linear1.", "weight", "bias", "weight.1", "bias.1", "weight.2", "bias.2", "weight.3", "bias.3")
		l.add(b+"norm.", "query_norm.scale", "key_norm.scale")
	}
	return l
}

func TestRoundTripFluxDiffusers(t *testing.T) {
	diff, bfl := fluxDiffusersNames(), fluxBFLNames()
	if len(diff) != len(bfl) {
		t.Fatalf("layouts differ in size: diffusers %d, BFL %d", len(diff), len(bfl))
	}
	got, err := ConvertAll(diff, Flux)
	if err != nil {
		t.Fatal(err)
	}
	gs, ws := sortedCopy(got), sortedCopy(bfl)
	for i := range gs {
		if gs[i] != ws[i] {
			t.Fatalf("sorted name %d: converted %q, BFL %q", i, gs[i], ws[i])
		}
	}
	for _, n := range bfl {
		if c := Convert(n, Flux); c != n {
			t.Errorf("BFL name %q converts to %q", n, c)
		}
	}
}

// Converting a converted name again changes nothing, for every case of the
// table tests except LoRA names (sd.cpp moves a LoRA's ".alpha" to
// ".weight.alpha" on each pass, so those are not fixed points there either).
func TestConvertedNamesAreFixedPoints(t *testing.T) {
	var all []convCase
	for _, f := range []func() []convCase{prefixCases, sd1UNetCases, sdxlUNetCases, vaeCases, textEncoderCases, fluxCases, sd3Cases, otherCases, wanCases} {
		all = append(all, f()...)
	}
	if len(all) < 200 {
		t.Fatalf("only %d cases", len(all))
	}
	for _, c := range all {
		if got := Convert(c.want, c.v); got != c.want {
			t.Errorf("Convert(%q, %v) = %q: a converted name is not a fixed point  [%s]", c.want, c.v, got, c.rule)
		}
	}
}
