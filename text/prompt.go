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

// Bracket multipliers of the A1111 prompt syntax.
const (
	roundMultiplier  = float32(1.1)
	squareMultiplier = float32(1 / 1.1)
)

// ParseAttention splits a prompt into weighted segments with the A1111 / stable-diffusion.cpp syntax:
// "(text)" multiplies attention by 1.1, "[text]" divides it by 1.1, "(text:1.5)" sets the multiplier,
// brackets nest (their multipliers multiply), and "\(", "\)", "\[", "\]", "\\" write the character itself.
// Unclosed brackets apply to the end of the prompt, an unmatched ")" or "]" is plain text, and neighbouring
// segments of equal weight are joined. Weights are float32 products, as in stable-diffusion.cpp.
//
// Where the two reference parsers differ this follows A1111: every backslash escape drops its backslash
// (sd.cpp does so only for "\("), and a ":1.2)" with no open "(" stays text (sd.cpp drops it). A weight
// that does not parse as a number ("(a:1.2.3)") keeps the longest prefix that does, as C's stof does; with
// none, the ":..." is text. "BREAK" is ordinary text, as in stable-diffusion.cpp.
func ParseAttention(text string) []PromptSegment {
	var res []PromptSegment
	var round, square []int
	multiply := func(from int, m float32) {
		for i := from; i < len(res); i++ {
			res[i].Weight *= m
		}
	}
	appendText := func(s string) {
		res = append(res, PromptSegment{Text: s, Weight: 1})
	}
	for i := 0; i < len(text); {
		c := text[i]
		switch c {
		case '\\':
			// "\(" "\)" "\[" "\]" "\\" are escapes; a lone backslash (any other next byte, or none)
			// is a token of its own and, as in A1111, loses itself: text[1:] is empty.
			if i+1 < len(text) && strings.IndexByte(`()[]\`, text[i+1]) >= 0 {
				appendText(text[i+1 : i+2])
				i += 2
			} else {
				i++
			}
		case '(':
			round = append(round, len(res))
			i++
		case '[':
			square = append(square, len(res))
			i++
		case ')':
			if len(round) > 0 {
				multiply(round[len(round)-1], roundMultiplier)
				round = round[:len(round)-1]
			} else {
				appendText(")")
			}
			i++
		case ']':
			if len(square) > 0 {
				multiply(square[len(square)-1], squareMultiplier)
				square = square[:len(square)-1]
			} else {
				appendText("]")
			}
			i++
		case ':':
			if w, n, ok := weightToken(text[i:]); ok && len(round) > 0 {
				multiply(round[len(round)-1], w)
				round = round[:len(round)-1]
				i += n
			} else if ok {
				// A weight with no open bracket is text, whole (A1111).
				appendText(text[i : i+n])
				i += n
			} else {
				appendText(":")
				i++
			}
		default:
			j := i
			for j < len(text) && strings.IndexByte(`\()[]:`, text[j]) < 0 {
				j++
			}
			appendText(text[i:j])
			i = j
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

// weightToken matches ":<number>)" at the start of s, where <number> is [+-]?[.0-9]+ as in the reference
// regex, and returns the weight, the token's length and whether it matched.
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
// segment of ParseAttention is encoded on its own and its tokens get its weight; the tokens are then cut
// into chunks of chunkLen-2, each chunk framed by BOS and EOS (weight 1), and the last chunk is padded to
// chunkLen with padID (weight 1). The result is a whole number of chunks (at least one), so a prompt longer
// than 75 tokens is kept, not truncated; the text encoder runs once per chunk and concatenates. chunkLen is
// usually CLIPMaxLength; values below 3 are raised to 3.
func (t *CLIPTokenizer) EncodeWeighted(prompt string, chunkLen, padID int) (ids []int, weights []float32) {
	chunkLen = max(chunkLen, 3)
	var toks []int
	var ws []float32
	for _, seg := range ParseAttention(prompt) {
		n := len(toks)
		toks = t.appendEncode(toks, seg.Text)
		for range len(toks) - n {
			ws = append(ws, seg.Weight)
		}
	}
	per := chunkLen - 2
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
