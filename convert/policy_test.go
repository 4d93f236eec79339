package convert

import (
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

func mustRules(t *testing.T, s string) []pipeline.Rule[formats.DType] {
	t.Helper()
	r, err := ParseRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDecide(t *testing.T) {
	type c struct {
		name    string
		storage formats.DType
		row     int64
		int8    bool
		target  string // "" = no --type
		rules   string
		want    formats.DType
		kept    bool
	}
	cases := []c{
		{"model.diffusion_model.blocks.0.attn.to_q.weight", formats.F32, 512, false, "q4_K", "", formats.Q4_K, false},
		{"model.diffusion_model.blocks.0.norm.weight", formats.F32, 256, false, "q4_K", "", formats.Q4_K, false}, // 1-D norms are quantized
		{"model.diffusion_model.blocks.0.ff.net.2.weight", formats.F32, 320, false, "q4_K", "", formats.F32, true},
		{"model.diffusion_model.blocks.0.ff.net.2.weight", formats.F32, 320, false, "q8_0", "", formats.Q8_0, false},
		{"model.diffusion_model.blocks.0.attn.to_q.bias", formats.F32, 64, false, "f16", "", formats.F32, true},
		{"model.diffusion_model.blocks.0.norm.scale", formats.F32, 256, false, "q4_K", "", formats.F32, true},
		{"x.weight_scale", formats.F32, 256, false, "q4_K", "", formats.F32, true},
		{"model.diffusion_model.time_embed.0.weight", formats.F32, 256, false, "q4_K", "", formats.F32, true},
		{"cond_stage_model.transformer.text_model.embeddings.token_embedding.weight", formats.F32, 256, false, "q8_0", "", formats.F32, true},
		{"model.diffusion_model.blocks.2.q.weight", formats.I8, 256, true, "q4_K", "", formats.I8, true},
		{"model.diffusion_model.blocks.1.ids", formats.I32, 8, false, "f16", "", formats.I32, true},
		{"model.diffusion_model.blocks.1.attn.to_out.0.weight", formats.BF16, 256, false, "", "", formats.BF16, false},
		// Rules: first match wins, overrides --type, exclusions still apply.
		{"first_stage_model.decoder.mid.attn_1.q.weight", formats.F32, 256, false, "q4_K", `^first_stage_model\.=f16,attn\.to_v=q8_0`, formats.F16, false},
		{"model.diffusion_model.blocks.0.attn.to_v.weight", formats.F32, 256, false, "q4_K", `^first_stage_model\.=f16,attn\.to_v=q8_0`, formats.Q8_0, false},
		{"a.fc1.weight", formats.F32, 256, false, "", "fc1=q5_K,weight=q6_K", formats.Q5_K, false},
		{"a.fc2.weight", formats.F32, 256, false, "", "fc1=q5_K,weight=q6_K", formats.Q6_K, false},
		{"a.fc2.other", formats.F32, 256, false, "", "fc1=q5_K,weight=q6_K", formats.F32, false},
		{"a.attn.to_q.bias", formats.F32, 256, false, "q8_0", "bias=q8_0", formats.F32, true},
	}
	for _, tc := range cases {
		var target formats.DType
		if tc.target != "" {
			var err error
			if target, err = ParseTargetType(tc.target); err != nil {
				t.Fatal(err)
			}
		}
		var rules []pipeline.Rule[formats.DType]
		if tc.rules != "" {
			rules = mustRules(t, tc.rules)
		}
		d := Decide(tc.name, tc.storage, tc.row, tc.int8, target, tc.target != "", rules)
		if d.Type != tc.want || (d.Kept != "") != tc.kept {
			t.Errorf("%s (%s, --type %q, rules %q): got %s kept=%q, want %s kept=%v", tc.name, tc.storage, tc.target, tc.rules, d.Type, d.Kept, tc.want, tc.kept)
		}
	}
}

func TestParseRulesErrors(t *testing.T) {
	for in, want := range map[string]string{
		"a=q4k":           `unknown type "q4k" (did you mean q4_K?)`,
		"a=bogus":         "unknown type",
		"a=q8_1":          "cannot be written",
		"a=q8_K":          "cannot be written",
		"a=q2_0":          "newer",
		"noequals":        "PATTERN=TYPE",
		"(?!x)y=q8_0":     "lookahead",
		"(?<!x)y=q8_0":    "lookbehind",
		`(a)\1=q8_0`:      "backreferences",
		"a[=q8_0":         "pattern",
		"a=fp8_e4m3":      "quantize",
		`\u0041=q8_0`:     "\\x{XXXX}",
		"ok=q8_0,,b=f16x": "unknown type",
	} {
		_, err := ParseRules(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRules(%q) = %v, want an error containing %q", in, err, want)
		}
	}
	// sd-cli takes only ggml's spelling; no two ggml names differ only in
	// case, so sdtool takes any capitalisation.
	if r, err := ParseRules("a=Q8_0,b=Q4_K"); err != nil || r[0].Value != formats.Q8_0 || r[1].Value != formats.Q4_K {
		t.Errorf("upper-case type names: %v %v", r, err)
	}
	r, err := ParseRules(",a=f32,,b=q4_K,")
	if err != nil || len(r) != 2 || r[0].Value != formats.F32 || r[1].Value != formats.Q4_K {
		t.Errorf("empty items: %v %v", r, err)
	}
}

func TestUnused(t *testing.T) {
	for name, want := range map[string]bool{
		"betas": true, "alphas_cumprod_prev": true, "model_ema.decay": true,
		"cond_stage_model.transformer.text_model.embeddings.position_ids": true,
		"model.diffusion_model.out.2.weight":                              false, "alphas_cumprod": false,
	} {
		if Unused(name) != want {
			t.Errorf("Unused(%q) != %v", name, want)
		}
	}
}
