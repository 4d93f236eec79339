package text

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
)

// lookPath returns the path of a program on PATH, or "" when it is not installed.
func lookPath(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

// spmTestPool is what the random lines are made of: words the vocabulary knows and does not know, and
// the characters normalization and segmentation treat specially.
var spmTestPool = []string{
	"a", "the", "photo", "of", "cat", "Hello", "WORLD", "summarization", "unbelievably", "Zürich", "naïve",
	"café", "cafe\u0301", "straße", "Ærøskøbing", "Œuvre", "ﬁne", "ﬂow", "ＡＢＣ", "１２３", "①", "Ⅻ", "㎏", "™",
	"…", "—", "–", "«", "»", "“", "”", "‘", "’", "'", "\"", ",", ".", "!", "?", ";", ":", "(", ")", "[",
	"]", "{", "}", "<", ">", "</s>", "<pad>", "<unk>", "<extra_id_0>", "#", "$", "€", "£", "¥", "%", "&",
	"*", "+", "=", "/", "\\", "|", "_", "~", "～", "^", "`", "@", "0", "7", "42", "2016", "3.14", "1,000",
	"😂", "👍🏻", "❤️", "👨\u200d👩\u200d👧", "🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F",
	"生活", "東京", "한국어", "Привет", "Ελλάδα", "עברית", "العربية", "हिन्दी", "ไทย",
	"▁", "▁a", "\u00a0", "\u3000", "\u200b", "\u200d", "\ufeff", "\ufffd", "\x00", "\x01", "\x7f", "\u0085",
	"\xff", "\xc3", "\xe2\x96", "\xed\xa0\x80", "\xf4\x90\x80\x80",
}

var spmTestSeparators = []string{" ", " ", " ", "", "  ", "\t", "   ", " \u00a0 ", "\r"}

// spmTestLines returns n deterministic random lines without newlines.
func spmTestLines(n int) []string {
	rng := rand.New(rand.NewPCG(13, 5))
	lines := make([]string, n)
	for i := range lines {
		var b strings.Builder
		if rng.IntN(4) == 0 {
			b.WriteString(spmTestSeparators[rng.IntN(len(spmTestSeparators))])
		}
		for w := rng.IntN(12) + 1; w > 0; w-- {
			b.WriteString(spmTestPool[rng.IntN(len(spmTestPool))])
			if w > 1 || rng.IntN(4) == 0 {
				b.WriteString(spmTestSeparators[rng.IntN(len(spmTestSeparators))])
			}
		}
		lines[i] = b.String()
	}
	return lines
}

// runSPMEncode encodes lines (one per input line) with SentencePiece's spm_encode and returns the ids.
func runSPMEncode(spmEncode, model string, lines []string) ([][]int32, error) {
	cmd := exec.Command(spmEncode, "--model="+model, "--output_format=id")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("spm_encode: %v: %s", err, stderr.String())
	}
	var got [][]int32
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ids []int32
		for _, f := range strings.Fields(sc.Text()) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("spm_encode output %q: %v", sc.Text(), err)
			}
			ids = append(ids, int32(v))
		}
		got = append(got, ids)
	}
	if len(got) != len(lines) {
		return nil, fmt.Errorf("spm_encode gave %d lines for %d", len(got), len(lines))
	}
	return got, nil
}
