package text

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// prod multiplies float32 factors in order, as sd.cpp applies bracket multipliers (innermost first).
func prod(fs ...float32) float32 {
	p := float32(1)
	for _, f := range fs {
		p *= f
	}
	return p
}

func TestParseAttention(t *testing.T) {
	type seg = PromptSegment
	const r, sq = roundMultiplier, squareMultiplier
	cases := []struct {
		in   string
		want []seg
	}{
		// The examples documented with sd.cpp's parse_prompt_attention (after A1111's).
		{"normal text", []seg{{"normal text", 1}}},
		{"an (important) word", []seg{{"an ", 1}, {"important", r}, {" word", 1}}},
		{"(unbalanced", []seg{{"unbalanced", r}}},
		{"(unnecessary)(parens)", []seg{{"unnecessaryparens", r}}},
		{"a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).", []seg{
			{"a ", 1}, {"house", prod(1.3, r, r)}, {" ", r}, {"on", prod(sq, r)}, {" a ", r}, {"hill", prod(0.5, r)},
			{", sun, ", r}, {"sky", prod(r, r, r, r)}, {".", r}}},
		// sd.cpp's code, unlike its comment and A1111, keeps the backslash of every escape but "\(".
		{`\(literal\]`, []seg{{`(literal\]`, 1}}},
		{`\\ \) \[ x\`, []seg{{`\\ \) \[ x\`, 1}}},
		// More syntax.
		{"", []seg{{"", 1}}},
		{"[low]", []seg{{"low", sq}}},
		{"[[low]]", []seg{{"low", prod(sq, sq)}}},
		{"((sofa))", []seg{{"sofa", prod(r, r)}}},
		{"(cat:1.5) dog", []seg{{"cat", 1.5}, {" dog", 1}}},
		{"((cat:2))", []seg{{"cat", prod(2, r)}}},
		{"(cat:-1)", []seg{{"cat", -1}}},
		{"(cat:.5)", []seg{{"cat", 0.5}}},
		{"(cat:1.2.3)", []seg{{"cat", 1.2}}},    // stof reads the longest number prefix
		{"(cat:.)", []seg{{"cat:.", r}}},        // sd-cli aborts; here ":" and "." are text, ")" closes
		{"a cat:1.2) b", []seg{{"a cat b", 1}}}, // a weight with no "(" is dropped (sd.cpp)
		{"a ) b ] c", []seg{{"a ) b ] c", 1}}},
		{"time: 12:30", []seg{{"time: 12:30", 1}}},
		{"(a [b] c)", []seg{{"a ", r}, {"b", prod(sq, r)}, {" c", r}}},
		// BREAK: a segment of its own where the regex's \b finds it, text elsewhere.
		{"BREAK (x)", []seg{{"BREAK", BreakWeight}, {" ", 1}, {"x", r}}},
		{"a BREAK b", []seg{{"a ", 1}, {"BREAK", BreakWeight}, {" b", 1}}},
		{"xBREAK y", []seg{{"x", 1}, {"BREAK", BreakWeight}, {" y", 1}}},
		{"BREAKfast, BREAK_x, Bob", []seg{{"BREAKfast, BREAK_x, Bob", 1}}},
		{"(a BREAK b)", []seg{{"a ", r}, {"BREAK", prod(BreakWeight, r)}, {" b", r}}},
	}
	for _, c := range cases {
		got := ParseAttention(c.in)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseAttention(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := ParseAttention("(a BREAK b)"); got[1].IsBreak() {
		t.Errorf("a bracketed BREAK starts a chunk: %v", got)
	}
	if got := ParseAttention("a BREAK b"); !got[1].IsBreak() {
		t.Errorf("a BREAK does not start a chunk: %v", got)
	}
}

func TestSquareMultiplierIsFloat32Quotient(t *testing.T) {
	// sd.cpp's 1 / 1.1f is a float32 division at run time.
	one, eleven := float32(1), float32(1.1)
	if q := one / eleven; squareMultiplier != q {
		t.Fatalf("squareMultiplier %v, float32 quotient %v", squareMultiplier, q)
	}
}

func TestParseAttentionKeepsText(t *testing.T) {
	// Without brackets, colons or backslashes the text comes back whole at weight 1.
	for _, s := range []string{"a photo of a cat", "masterpiece, best quality", "日本語 テキスト"} {
		if got := ParseAttention(s); len(got) != 1 || got[0].Text != s || got[0].Weight != 1 {
			t.Errorf("ParseAttention(%q) = %v", s, got)
		}
	}
}

func TestEncodeWeighted(t *testing.T) {
	tok := tinyTokenizer(t)
	ids, ws := tok.EncodeWeighted("a (photo:1.5) of [a cat]", 9, 0)
	want := []int{519, 320, 518, 512, 320, 514, 520, 0, 0}
	wantW := []float32{1, 1, 1.5, 1, squareMultiplier, squareMultiplier, 1, 1, 1}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	for i := range ws {
		if math.Abs(float64(ws[i]-wantW[i])) > 1e-6 {
			t.Fatalf("weights %v, want %v", ws, wantW)
		}
	}
	// Empty prompt: one chunk, BOS EOS then padding.
	ids, ws = tok.EncodeWeighted("", 5, SD1PadID)
	if !reflect.DeepEqual(ids, []int{519, 520, SD1PadID, SD1PadID, SD1PadID}) || len(ws) != 5 {
		t.Fatalf("empty: %v %v", ids, ws)
	}
	// Five tokens with room for three per chunk: two chunks, each framed, the last padded.
	ids, _ = tok.EncodeWeighted("a photo of a cat", 5, 7)
	want = []int{519, 320, 518, 512, 520, 519, 320, 514, 520, 7}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("chunks: %v, want %v", ids, want)
	}
	// BREAK pads the tokens so far with EOS to a whole chunk (a trailing one too, so no padID follows); the
	// text after it starts the next one, and a BREAK at a chunk's start pads nothing.
	ids, ws = tok.EncodeWeighted("(a) BREAK photo BREAK", 7, 0)
	want = []int{519, 320, 520, 520, 520, 520, 520, 519, 518, 520, 520, 520, 520, 520}
	wantW = []float32{1, roundMultiplier, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	if !reflect.DeepEqual(ids, want) || !reflect.DeepEqual(ws, wantW) {
		t.Fatalf("BREAK: %v %v, want %v %v", ids, ws, want, wantW)
	}
	ids, _ = tok.EncodeWeighted("BREAK a", 7, 0)
	if !reflect.DeepEqual(ids, []int{519, 320, 520, 0, 0, 0, 0}) {
		t.Fatalf("leading BREAK: %v", ids)
	}
	// Exactly full chunks need no padding.
	ids, _ = tok.EncodeWeighted("a photo of", 5, 7)
	if !reflect.DeepEqual(ids, []int{519, 320, 518, 512, 520}) {
		t.Fatalf("full chunk: %v", ids)
	}
}

func TestEncodeWeightedReal(t *testing.T) {
	tok := realTokenizer(t)
	ids, ws := tok.EncodeWeighted(strings.Repeat("cat, ", 40), CLIPMaxLength, SD1PadID)
	if len(ids) != 2*CLIPMaxLength || len(ws) != len(ids) {
		t.Fatalf("80 tokens: %d ids, %d weights", len(ids), len(ws))
	}
	if ids[0] != CLIPBOS || ids[76] != CLIPEOS || ids[77] != CLIPBOS || ids[153] != SD1PadID {
		t.Fatalf("chunk framing: %v", ids)
	}
	plain := tok.EncodePadded("a photo of a cat", CLIPMaxLength, SD2PadID)
	weighted, _ := tok.EncodeWeighted("a photo of a cat", CLIPMaxLength, SD2PadID)
	if !reflect.DeepEqual(plain, weighted) {
		t.Fatalf("unweighted prompt: %v vs %v", weighted, plain)
	}
}

func FuzzParseAttention(f *testing.F) {
	for _, s := range []string{"a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).", `\(x\)`, "(a:1.2.3)", ":", "((", "]]", `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		segs := ParseAttention(s)
		if len(segs) == 0 {
			t.Fatal("no segments")
		}
		var b strings.Builder
		for i, seg := range segs {
			if i > 0 && segs[i-1].Weight == seg.Weight {
				t.Fatalf("neighbours %d and %d share weight %v", i-1, i, seg.Weight)
			}
			b.WriteString(seg.Text)
		}
		// Parsing only removes syntax: the text never grows, and valid UTF-8 stays valid (the syntax is ASCII).
		if b.Len() > len(s) {
			t.Fatalf("text grew: %q -> %q", s, b.String())
		}
		if utf8.ValidString(s) && !utf8.ValidString(b.String()) {
			t.Fatalf("invalid UTF-8 from %q", s)
		}
	})
}
