package lora

import (
	"sort"
	"strings"
)

// Role is what one tensor of an adapter layer holds.
type Role uint8

// Roles of adapter tensors. The LoRA factors are named by kohya's
// convention: up is the [out, rank] factor (PEFT's lora_B), down the
// [rank, in] one (lora_A).
const (
	RoleNone Role = iota
	RoleUp
	RoleDown
	RoleMid
	RoleAlpha
	RoleScale
	RoleDoRA
	RoleDiff
	RoleDiffBias
	RoleHadaW1A
	RoleHadaW1B
	RoleHadaW2A
	RoleHadaW2B
	RoleHadaT1
	RoleHadaT2
	RoleLoKrW1
	RoleLoKrW1A
	RoleLoKrW1B
	RoleLoKrW2
	RoleLoKrW2A
	RoleLoKrW2B
	RoleLoKrT1
	RoleLoKrT2
	// RoleRefused marks a tensor of an adapter kind sdtool does not apply
	// (IA3, OFT, GLoRA, weight replacement); the suffix table says which.
	RoleRefused
	numRoles
)

var roleNames = [numRoles]string{
	RoleNone: "none", RoleUp: "up", RoleDown: "down", RoleMid: "mid", RoleAlpha: "alpha",
	RoleScale: "scale", RoleDoRA: "dora_scale", RoleDiff: "diff", RoleDiffBias: "diff_b",
	RoleHadaW1A: "hada_w1_a", RoleHadaW1B: "hada_w1_b", RoleHadaW2A: "hada_w2_a", RoleHadaW2B: "hada_w2_b",
	RoleHadaT1: "hada_t1", RoleHadaT2: "hada_t2", RoleLoKrW1: "lokr_w1", RoleLoKrW1A: "lokr_w1_a",
	RoleLoKrW1B: "lokr_w1_b", RoleLoKrW2: "lokr_w2", RoleLoKrW2A: "lokr_w2_a", RoleLoKrW2B: "lokr_w2_b",
	RoleLoKrT1: "lokr_t1", RoleLoKrT2: "lokr_t2", RoleRefused: "refused",
}

// String returns the role's short name ("up", "hada_w1_a").
func (r Role) String() string {
	if r < numRoles {
		return roleNames[r]
	}
	return "role?"
}

// suffix is one way a key can end: the suffix names the role, and style the
// naming convention it belongs to (for the adapter summary).
type suffix struct {
	text   string
	role   Role
	style  string
	refuse string // for RoleRefused: the adapter kind, for the error
	// needs, when set, must occur in the module name: XLabs' ".down.weight"
	// is a LoRA factor only on its "..._lora1" processor modules.
	needs string
}

// The suffixes adapter files use, from kohya/LyCORIS (".lora_up.weight",
// ".hada_w1_a"), PEFT and diffusers (".lora_B.weight", ".lora.up.weight",
// "_lora.up.weight" of attention processors, ".lora_linear_layer.up.weight"
// of transformers-style text encoders) and ComfyUI's LyCORIS norm layers.
// ParseKey tries the longest first, so ".lora_A.weight" is never read as
// ".weight".
var suffixes = func() []suffix {
	l := []suffix{
		{".lora_up.weight", RoleUp, "kohya", "", ""},
		{".lora_down.weight", RoleDown, "kohya", "", ""},
		{".lora_mid.weight", RoleMid, "kohya", "", ""},
		{".alpha", RoleAlpha, "", "", ""},
		{".scale", RoleScale, "", "", ""},
		{".dora_scale", RoleDoRA, "", "", ""},
		{".lora_B.weight", RoleUp, "peft", "", ""},
		{".lora_A.weight", RoleDown, "peft", "", ""},
		{".lora_B.default.weight", RoleUp, "peft", "", ""},
		{".lora_A.default.weight", RoleDown, "peft", "", ""},
		{".lora_B", RoleUp, "peft", "", ""},
		{".lora_A", RoleDown, "peft", "", ""},
		{".lora_magnitude_vector", RoleDoRA, "peft", "", ""},
		{".lora_magnitude_vector.weight", RoleDoRA, "peft", "", ""},
		{".lora_magnitude_vector.default.weight", RoleDoRA, "peft", "", ""},
		{".lora.up.weight", RoleUp, "diffusers", "", ""},
		{".lora.down.weight", RoleDown, "diffusers", "", ""},
		{".lora.mid.weight", RoleMid, "diffusers", "", ""},
		{"_lora.up.weight", RoleUp, "diffusers", "", ""},
		{"_lora.down.weight", RoleDown, "diffusers", "", ""},
		{".lora_linear_layer.up.weight", RoleUp, "diffusers", "", ""},
		{".lora_linear_layer.down.weight", RoleDown, "diffusers", "", ""},
		// sd.cpp's own form of LoRA names ("lora.<name>.weight.lora_up"),
		// which its convert mode writes when it converts names.
		{".lora_up", RoleUp, "sdcpp", "", ""},
		{".lora_down", RoleDown, "sdcpp", "", ""},
		{".lora_mid", RoleMid, "sdcpp", "", ""},
		{".up.weight", RoleUp, "xlabs", "", "_lora"},
		{".down.weight", RoleDown, "xlabs", "", "_lora"},
		{".diff", RoleDiff, "lycoris", "", ""},
		{".diff_b", RoleDiffBias, "lycoris", "", ""},
		{".w_norm", RoleDiff, "lycoris", "", ""},
		{".b_norm", RoleDiffBias, "lycoris", "", ""},
		{".hada_w1_a", RoleHadaW1A, "lycoris", "", ""},
		{".hada_w1_b", RoleHadaW1B, "lycoris", "", ""},
		{".hada_w2_a", RoleHadaW2A, "lycoris", "", ""},
		{".hada_w2_b", RoleHadaW2B, "lycoris", "", ""},
		{".hada_t1", RoleHadaT1, "lycoris", "", ""},
		{".hada_t2", RoleHadaT2, "lycoris", "", ""},
		{".lokr_w1", RoleLoKrW1, "lycoris", "", ""},
		{".lokr_w1_a", RoleLoKrW1A, "lycoris", "", ""},
		{".lokr_w1_b", RoleLoKrW1B, "lycoris", "", ""},
		{".lokr_w2", RoleLoKrW2, "lycoris", "", ""},
		{".lokr_w2_a", RoleLoKrW2A, "lycoris", "", ""},
		{".lokr_w2_b", RoleLoKrW2B, "lycoris", "", ""},
		{".lokr_t1", RoleLoKrT1, "lycoris", "", ""},
		{".lokr_t2", RoleLoKrT2, "lycoris", "", ""},
		// Kinds that are not a sum of a low-rank delta, or replace weights.
		{".on_input", RoleRefused, "lycoris", "IA3 (it scales activations, there is no weight delta to bake)", ""},
		{".oft_blocks", RoleRefused, "lycoris", "OFT/BOFT (an orthogonal rotation of the weight, not a delta)", ""},
		{".oft_diag", RoleRefused, "lycoris", "OFT (an orthogonal rotation of the weight, not a delta)", ""},
		{".rescale", RoleRefused, "lycoris", "OFT/BOFT rescaling", ""},
		{".a1.weight", RoleRefused, "lycoris", "GLoRA", ""},
		{".a2.weight", RoleRefused, "lycoris", "GLoRA", ""},
		{".b1.weight", RoleRefused, "lycoris", "GLoRA", ""},
		{".b2.weight", RoleRefused, "lycoris", "GLoRA", ""},
		{".set_weight", RoleRefused, "comfyui", "weight replacement (set_weight)", ""},
		{".reshape_weight", RoleRefused, "comfyui", "reshape_weight", ""},
	}
	sort.SliceStable(l, func(i, j int) bool { return len(l[i].text) > len(l[j].text) })
	return l
}()

// ParseKey splits an adapter tensor name into the module it adapts and the
// role of the tensor ("lora_unet_x_proj_in.lora_up.weight" is module
// "lora_unet_x_proj_in", RoleUp). ok is false for a key with no known
// suffix, or with nothing before it.
func ParseKey(key string) (module string, role Role, ok bool) {
	s, ok := findSuffix(key)
	if !ok {
		return "", RoleNone, false
	}
	return key[:len(key)-len(s.text)], s.role, true
}

func findSuffix(key string) (suffix, bool) {
	for _, s := range suffixes {
		if len(key) > len(s.text) && strings.HasSuffix(key, s.text) &&
			(s.needs == "" || strings.Contains(key[:len(key)-len(s.text)], s.needs)) {
			return s, true
		}
	}
	return suffix{}, false
}
