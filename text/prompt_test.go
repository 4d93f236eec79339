package text

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseAttention(t *testing.T) {
	type seg = PromptSegment
	cases := []struct {
		in   string
		want []seg
	}{
		// The examples documented with A1111's parse_prompt_attention.
		{"normal text", []seg{{"normal text", 1}}},
		{"an (important) word", []seg{{"an ", 1}, {"important", 1.1}, {" word", 1}}},
		{"(unbalanced", []seg{{"unbalanced", 1.1}}},
		{`\(literal\]`, []seg{{"(literal]", 1}}},
		{"(unnecessary)(parens)", []seg{{"unnecessaryparens", 1.1}}},
		{"a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).", []seg{
			{"a ", 1}, {"house", 1.573}, {" ", 1.1}, {"on", 1}, {" a ", 1.1}, {"hill", 0.55},
			{", sun, ", 1.1}, {"sky", 1.4641}, {".", 1.1}}},
		// More syntax.
		{"", []seg{{"", 1}}},
		{"[low]", []seg{{"low", 1 / 1.1}}},
		{"[[low]]", []seg{{"low", 1 / 1.21}}},
		{"(cat:1.5) dog", []seg{{"cat", 1.5}, {" dog", 1}}},
		{"((cat:2))", []seg{{"cat", 2.2}}},
		{"(cat:-1)", []seg{{"cat", -1}}},
		{"(cat:.5)", []seg{{"cat", 0.5}}},
		{"(cat:1.2.3)", []seg{{"cat", 1.2}}},         // stof reads the longest number prefix
		{"(cat:.)", []seg{{"cat:.", 1.1}}},           // no number: ":" and "." are text, ")" closes the bracket
		{"a cat:1.2) b", []seg{{"a cat:1.2) b", 1}}}, // a weight with no "(" is text (A1111)
		{"a ) b ] c", []seg{{"a ) b ] c", 1}}},
		{`\\ \) \[ x\`, []seg{{`\ ) [ x`, 1}}},
		{"time: 12:30", []seg{{"time: 12:30", 1}}},
		{"(a [b] c)", []seg{{"a ", 1.1}, {"b", 1}, {" c", 1.1}}},
		{"BREAK (x)", []seg{{"BREAK ", 1}, {"x", 1.1}}},
	}
	for _, c := range cases {
		got := ParseAttention(c.in)
		if len(got) != len(c.want) {
			t.Errorf("ParseAttention(%q) = %v, want %v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i].Text != c.want[i].Text || math.Abs(float64(got[i].Weight-c.want[i].Weight)) > 2e-6 {
				t.Errorf("ParseAttention(%q)[%d] = %+v, want %+v", c.in, i, got[i], c.want[i])
			}
		}
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
	wantIDs := []int{519, 320, 518, 512, 320, 514, 520, 0, 0}
	wantW := []float32{1, 1, 1.5, 1, 1 / 1.1, 1 / 1.1, 1, 1, 1}
	if !reflect.DeepEqual(ids, wantIDs) {
		t.Fatalf("ids %v, want %v", ids, wantIDs)
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
	want := []int{519, 320, 518, 512, 520, 519, 320, 514, 520, 7}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("chunks: %v, want %v", ids, want)
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
