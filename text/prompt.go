package text

import (
	"math"
	"strconv"
	"strings"
)

// PromptSegment is a run of prompt text with one attention weight.
type PromptSegment struct {
	// Text is the segment's text, escapes resolved.
	Text string
	// Weight multiplies the segment's token embeddings (1 = unchanged).
	Weight float32
}

// Bracket multipliers of the A1111 prompt syntax, as float32 values: sd.cpp computes the square bracket's as the
// float32 quotient 1/1.1f, which a constant division rounded once reproduces.
const (
	roundMultiplier  = float32(1.1)
	squareMultiplier = 1 / roundMultiplier
)

// BreakWeight is the weight of a BREAK segment: ParseAttention returns a standalone "BREAK" as the segment
// {"BREAK", BreakWeight}, as stable-diffusion.cpp does, and only that exact pair starts a new chunk.
const BreakWeight = float32(-1)

// IsBreak reports whether s is a BREAK that starts a new chunk: brackets around a BREAK multiply its weight
// away from BreakWeight, and sd.cpp then encodes it as the text "BREAK" with that weight.
func (s PromptSegment) IsBreak() bool { return s.Text == "BREAK" && s.Weight == BreakWeight }

// ParseAttention splits a prompt into weighted segments as stable-diffusion.cpp 97d2990's
// parse_prompt_attention does (A1111's syntax): "(text)" multiplies attention by 1.1, "[text]" divides it by
// 1.1, "(text:1.5)" sets the multiplier, brackets nest (their multipliers multiply in float32), unclosed
// brackets apply to the end of the prompt, an unmatched ")" or "]" is text, and neighbouring segments of equal
// weight are joined. Where sd.cpp departs from A1111 this follows sd.cpp: only "\(" drops its backslash
// ("\)", "\[", "\]", "\\" and a lone backslash stay as written), a ":1.2)" with no open "(" is dropped,
// and "BREAK" standing alone is the segment {"BREAK", BreakWeight}, also inside a word ("xBREAK"), as sd.cpp's
// regex finds it. A weight reads the longest prefix that is a number ("1.2.3" is 1.2, as C's stof); where no
// prefix is ("(a:.)"), sd-cli aborts, and here ":" and the rest are text.
func ParseAttention(text string) []PromptSegment {
	var res []PromptSegment
	var round, square []int
	multiply := func(from int, m float32) {
		for i := from; i < len(res); i++ {
			res[i].Weight *= m
		}
	}
	for rest := text; rest != ""; {
		tok, w, hasWeight := attentionToken(rest)
		rest = rest[len(tok):]
		switch {
		case tok == "(":
			round = append(round, len(res))
		case tok == "[":
			square = append(square, len(res))
		case hasWeight:
			if len(round) > 0 {
				multiply(round[len(round)-1], w)
				round = round[:len(round)-1]
			}
		case tok == ")" && len(round) > 0:
			multiply(round[len(round)-1], roundMultiplier)
			round = round[:len(round)-1]
		case tok == "]" && len(square) > 0:
			multiply(square[len(square)-1], squareMultiplier)
			square = square[:len(square)-1]
		case tok == `\(`:
			res = append(res, PromptSegment{Text: "(", Weight: 1})
		case tok == "BREAK":
			res = append(res, PromptSegment{Text: "BREAK", Weight: BreakWeight})
		default:
			res = append(res, PromptSegment{Text: tok, Weight: 1})
		}
	}
	for _, p := range round {
		multiply(p, roundMultiplier)
	}
	for _, p := range square {
		multiply(p, squareMultiplier)
	}
	if len(res) == 0 {
		return []PromptSegment{{Text: "", Weight: 1}}
	}
	out := res[:1]
	for _, s := range res[1:] {
		if last := &out[len(out)-1]; last.Weight == s.Weight {
			last.Text += s.Text
		} else {
			out = append(out, s)
		}
	}
	return out
}

// attentionToken returns the token at the start of s (non-empty) that sd.cpp's attention regex matches there,
// its alternatives tried in the regex's order: the escapes "\(" "\)" "\[" "\]" "\\", a lone "\", "(", "[",
// ":<number>)" (with the weight and hasWeight set), ")", "]", "BREAK" followed by a non-word byte or the end,
// a run of bytes other than \()[]:B, ":", and "B". Every regex search starts on the rest of the prompt, so a
// "B" is always at a word boundary there.
func attentionToken(s string) (tok string, weight float32, hasWeight bool) {
	switch c := s[0]; c {
	case '\\':
		if len(s) > 1 && strings.IndexByte(`()[]\`, s[1]) >= 0 {
			return s[:2], 0, false
		}
		return s[:1], 0, false
	case '(', '[', ')', ']':
		return s[:1], 0, false
	case ':':
		if w, n, ok := weightToken(s); ok {
			return s[:n], w, true
		}
		return s[:1], 0, false
	case 'B':
		if strings.HasPrefix(s, "BREAK") && (len(s) == 5 || !isWordByte(s[5])) {
			return s[:5], 0, false
		}
		return s[:1], 0, false
	}
	n := 1
	for n < len(s) && strings.IndexByte(`\()[]:B`, s[n]) < 0 {
		n++
	}
	return s[:n], 0, false
}

// isWordByte reports whether c is a word character of the regex's \b in the C locale: [A-Za-z0-9_].
func isWordByte(c byte) bool {
	return c == '_' || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// weightToken matches ":<number>)" at the start of s, where <number> is [+-]?[.0-9]+ as in the reference
// regex, and returns the weight, the token's length and whether it matched with a number that parses.
func weightToken(s string) (float32, int, bool) {
	j := 1
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	start := j
	for j < len(s) && (s[j] == '.' || (s[j] >= '0' && s[j] <= '9')) {
		j++
	}
	if j == start || j >= len(s) || s[j] != ')' {
		return 0, 0, false
	}
	num := s[1:j]
	// Longest prefix that parses (stof semantics): "1.2.3" reads as 1.2, "." does not parse at all.
	for k := len(num); k > 0; k-- {
		if v, err := strconv.ParseFloat(num[:k], 32); err == nil && !math.IsInf(v, 0) {
			return float32(v), j + 1, true
		}
	}
	return 0, 0, false
}

// EncodeWeighted tokenizes a weighted prompt as stable-diffusion.cpp does for the CLIP text encoders: each
// segment of ParseAttention is encoded on its own and its tokens get its weight, and a BREAK pads the tokens
// so far with EOS (weight 1) to a multiple of chunkLen-2, so that the text after it starts a chunk; the
// tokens are then cut into chunks of chunkLen-2, each chunk framed by BOS and EOS (weight 1), and the last
// chunk is padded to chunkLen with padID (weight 1). The result is a whole number of chunks (at least one),
// so a prompt longer than 75 tokens is kept, not truncated; the text encoder runs once per chunk and
// concatenates. chunkLen is usually CLIPMaxLength; values below 3 are raised to 3.
func (t *CLIPTokenizer) EncodeWeighted(prompt string, chunkLen, padID int) (ids []int, weights []float32) {
	return t.encodeWeighted(prompt, chunkLen, padID, true)
}

// EncodeWeightedBreakAsText is EncodeWeighted with a BREAK encoded as the text "BREAK" at BreakWeight, as
// stable-diffusion.cpp's Flux conditioner does for its CLIP-L (only the SD 1.x/2.x/XL one handles BREAK).
func (t *CLIPTokenizer) EncodeWeightedBreakAsText(prompt string, chunkLen, padID int) (ids []int, weights []float32) {
	return t.encodeWeighted(prompt, chunkLen, padID, false)
}

func (t *CLIPTokenizer) encodeWeighted(prompt string, chunkLen, padID int, breaks bool) (ids []int, weights []float32) {
	chunkLen = max(chunkLen, 3)
	per := chunkLen - 2
	var toks []int
	var ws []float32
	for _, seg := range ParseAttention(prompt) {
		if breaks && seg.IsBreak() {
			for len(toks)%per != 0 {
				toks = append(toks, int(t.eos))
				ws = append(ws, 1)
			}
			continue
		}
		n := len(toks)
		toks = t.appendEncode(toks, seg.Text)
		for range len(toks) - n {
			ws = append(ws, seg.Weight)
		}
	}
	chunks := max((len(toks)+per-1)/per, 1)
	ids = make([]int, 0, chunks*chunkLen)
	weights = make([]float32, 0, chunks*chunkLen)
	for c := 0; c < chunks; c++ {
		lo, hi := c*per, min((c+1)*per, len(toks))
		ids = append(ids, int(t.bos))
		weights = append(weights, 1)
		ids = append(ids, toks[lo:hi]...)
		weights = append(weights, ws[lo:hi]...)
		ids = append(ids, int(t.eos))
		weights = append(weights, 1)
	}
	for len(ids) < chunks*chunkLen {
		ids = append(ids, padID)
		weights = append(weights, 1)
	}
	return ids, weights
}
