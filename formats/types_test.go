package formats

import "testing"

func TestTypeTable(t *testing.T) {
	cases := []struct {
		id         DType
		name       string
		block, byt int
	}{
		{F32, "f32", 1, 4}, {F16, "f16", 1, 2}, {Q4_0, "q4_0", 32, 18}, {Q4_1, "q4_1", 32, 20},
		{Q5_0, "q5_0", 32, 22}, {Q5_1, "q5_1", 32, 24}, {Q8_0, "q8_0", 32, 34}, {Q8_1, "q8_1", 32, 36},
		{Q2_K, "q2_K", 256, 84}, {Q3_K, "q3_K", 256, 110}, {Q4_K, "q4_K", 256, 144}, {Q5_K, "q5_K", 256, 176},
		{Q6_K, "q6_K", 256, 210}, {Q8_K, "q8_K", 256, 292}, {IQ2_XXS, "iq2_xxs", 256, 66}, {IQ2_XS, "iq2_xs", 256, 74},
		{IQ3_XXS, "iq3_xxs", 256, 98}, {IQ1_S, "iq1_s", 256, 50}, {IQ4_NL, "iq4_nl", 32, 18}, {IQ3_S, "iq3_s", 256, 110},
		{IQ2_S, "iq2_s", 256, 82}, {IQ4_XS, "iq4_xs", 256, 136}, {I8, "i8", 1, 1}, {I16, "i16", 1, 2}, {I32, "i32", 1, 4},
		{I64, "i64", 1, 8}, {F64, "f64", 1, 8}, {IQ1_M, "iq1_m", 256, 56}, {BF16, "bf16", 1, 2}, {TQ1_0, "tq1_0", 256, 54},
		{TQ2_0, "tq2_0", 256, 66}, {MXFP4, "mxfp4", 32, 17}, {NVFP4, "nvfp4", 64, 36}, {Q1_0, "q1_0", 128, 18}, {Q2_0, "q2_0", 64, 18},
	}
	for _, c := range cases {
		info := c.id.Info()
		if info.Name != c.name || info.BlockSize != c.block || info.BlockBytes != c.byt {
			t.Errorf("id %d: got %+v, want %s %d/%d", c.id, info, c.name, c.block, c.byt)
		}
		if got, ok := TypeByName(c.name); !ok || got != c.id {
			t.Errorf("TypeByName(%q) = %d, %v", c.name, got, ok)
		}
		if c.id.IsGGML() != true {
			t.Errorf("%s: not a ggml type", c.name)
		}
		if c.id.InLinkedGGML() != (c.id < 40) || info.Newer != (c.id >= 40) {
			t.Errorf("%s: linked/newer flags wrong", c.name)
		}
	}
	for _, removed := range []uint32{4, 5, 31, 32, 33, 36, 37, 38, 43} {
		if _, ok := FromGGML(removed); ok {
			t.Errorf("FromGGML(%d) accepted a removed id", removed)
		}
	}
}

func TestSafetensorsDtypes(t *testing.T) {
	want := map[string]struct {
		bits int
		ggml bool
	}{
		"BOOL": {8, false}, "U8": {8, false}, "I8": {8, true}, "I16": {16, true}, "U16": {16, false},
		"I32": {32, true}, "U32": {32, false}, "I64": {64, true}, "U64": {64, false}, "F16": {16, true},
		"BF16": {16, true}, "F32": {32, true}, "F64": {64, true}, "C64": {64, false}, "F8_E4M3": {8, false},
		"F8_E5M2": {8, false}, "F8_E4M3FNUZ": {8, false}, "F8_E5M2FNUZ": {8, false}, "F8_E8M0": {8, false},
		"F4": {4, false}, "F6_E2M3": {6, false}, "F6_E3M2": {6, false},
	}
	for name, w := range want {
		dt, ok := FromSafetensors(name)
		if !ok {
			t.Errorf("FromSafetensors(%q) unknown", name)
			continue
		}
		if got := dt.BitsPerElement(); got != float64(w.bits) {
			t.Errorf("%s: %v bits, want %d", name, got, w.bits)
		}
		if dt.IsGGML() != w.ggml {
			t.Errorf("%s: IsGGML=%v", name, dt.IsGGML())
		}
		back, _ := dt.SafetensorsName()
		if back != name {
			t.Errorf("%s: round trip gave %q", name, back)
		}
	}
	if _, ok := FromSafetensors("F12"); ok {
		t.Error("accepted an unknown dtype")
	}
}

func TestBytes(t *testing.T) {
	if n, err := Q4_K.Bytes([]int64{3, 512}); err != nil || n != 3*2*144 {
		t.Errorf("q4_K [3,512]: %d, %v", n, err)
	}
	if _, err := Q4_K.Bytes([]int64{3, 320}); err == nil {
		t.Error("q4_K accepted a row of 320")
	}
	if n, err := F4.Bytes([]int64{3, 5, 2}); err != nil || n != 15 {
		t.Errorf("F4 [3,5,2]: %d, %v", n, err)
	}
	if _, err := F4.Bytes([]int64{3}); err == nil {
		t.Error("F4 accepted 3 elements (a half byte)")
	}
	if n, err := F6_E2M3.Bytes([]int64{8}); err != nil || n != 6 {
		t.Errorf("F6 [8]: %d, %v", n, err)
	}
	if n, err := F32.Bytes(nil); err != nil || n != 4 {
		t.Errorf("scalar f32: %d, %v", n, err)
	}
	if _, err := F32.Bytes([]int64{1 << 40, 1 << 40}); err == nil {
		t.Error("no overflow error")
	}
	if p, _ := ParseType("Q4_K"); p != Q4_K {
		t.Error("ParseType is not case-insensitive")
	}
}
