package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/text"
)

// Prompt weights against sd-cli (issue 36): every form of the attention syntax renders at 50 dB or more
// against sd-cli on the full-size synthetic SD 1.5 (SDTOOL_SD15_MODEL for a real one) and on the synthetic
// SD 2.x and SDXL of familyModel (SDTOOL_SD2_MODEL, SDTOOL_SDXL_MODEL), 64x64, 2 Euler steps, seed 3, CFG 7, and the segments sdtool
// parses equal the ones sd-cli logs with -v. Run with
//
//	SDTOOL_LONG=1 SDTOOL_SDCLI=/path/sd-cli go test ./cmd/sdtool -run PromptWeightsSDCLI -v -timeout 1h
//
// (build the test with the README's optimised flags for figures comparable with `go run ./build`).

// promptCases are the syntax cases: the table, then nesting, escapes, BREAK, a weight across the
// 75-token chunk boundary, and a weighted negative prompt.
var promptCases = []struct{ name, prompt, negative string }{
	{"plain", "a photo of a dog on a sofa", ""},
	{"number", "(masterpiece:1.2) a photo of a dog on a sofa", ""},
	{"square", "a photo of a [dog] on a sofa", ""},
	{"double-round", "a photo of a dog on a ((sofa))", ""},
	{"nested", "a (photo of a (dog:1.3) on a [sofa]) at [[night]]", ""},
	{"escapes", `a \(photo\) of a dog on a \[sofa\]`, ""},
	{"break", "a photo of a dog BREAK on a (sofa:1.1)", ""},
	{"chunks", strings.Repeat("a photo of a dog on a sofa, ", 9) + "(a red sofa:1.3), " + strings.Repeat("a cat, ", 4), ""},
	{"negative", "a photo of a dog on a sofa", "(blurry:1.4), [ugly], ((bad hands))"},
}

// TestPromptWeightsSDCLI renders every case with both programs, on SD 1.5 (one CLIP-L), on SD 2.x (OpenCLIP
// ViT-H, which pads with token 0 rather than end-of-text) and on SDXL (CLIP-L and OpenCLIP bigG, whose hidden
// states sd-cli weights together: the mean it restores is the concatenation's). TestPromptWeightsSDCLI/sdxl
// runs the SDXL part alone.
func TestPromptWeightsSDCLI(t *testing.T) {
	bin, _ := sdcliEnv(t)
	longtest.Skip(t, "prompt weights against sd-cli")
	if _, err := os.Stat(parityMerges); err != nil {
		t.Skipf("no CLIP vocabulary at %s", parityMerges)
	}
	tok, err := text.LoadCLIPTokenizer(parityMerges)
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range []string{"sd1", "sd2", "sdxl"} {
		t.Run(family, func(t *testing.T) {
			dir := workDir(t, "prompts")
			model := familyModel(t, family, dir)
			t.Logf("| %s prompt | sdtool vs sd-cli |", family)
			for _, c := range promptCases {
				t.Run(c.name, func(t *testing.T) { promptCase(t, tok, bin, model, dir, family, c.name, c.prompt, c.negative) })
			}
		})
	}
}

// promptCase renders one prompt case with both programs and compares the images and the parsed segments.
func promptCase(t *testing.T, tok *text.CLIPTokenizer, bin, model, dir, family, name, prompt, negative string) {
	p := defaultParity()
	p.prompt, p.negative, p.seed, p.cfg = prompt, negative, 3, 7
	psnr, log := sdtoolVsSDCLI(t, bin, model, dir, "prompt-"+family+"-"+name, p)
	for _, s := range []string{prompt, negative} {
		if s == "" {
			continue
		}
		if err := compareParsed(tok, s, log); err != nil {
			t.Error(err)
		}
	}
	t.Logf("| `%s` | %.2f dB |", prompt+negSuffix(negative), psnr)
	if psnr < 50 {
		t.Errorf("%s %s: %.2f dB against sd-cli, want at least 50", family, name, psnr)
	}
}

func negSuffix(n string) string {
	if n == "" {
		return ""
	}
	return "` with `-n " + n
}

// sdcliParseLine is sd-cli's -v line for one parsed prompt: parse '<prompt>' to [['<text>', <weight>], ...].
var sdcliParseLine = regexp.MustCompile(`parse '(.*)' to \[(.*)\]`)

// sdcliSegment is one ['<text>', <weight>] item of that line, as C++'s ostream prints the float.
var sdcliSegment = regexp.MustCompile(`\['((?s).*?)', (-?[0-9][0-9.e+-]*|-?inf|-?nan)\], `)

// sdcliSegments returns the segments sd-cli logged for prompt.
func sdcliSegments(prompt, log string) ([][2]string, bool) {
	for _, line := range strings.Split(log, "\n") {
		m := sdcliParseLine.FindStringSubmatch(line)
		if m == nil || m[1] != prompt {
			continue
		}
		var segs [][2]string
		for _, s := range sdcliSegment.FindAllStringSubmatch(m[2]+" ", -1) {
			segs = append(segs, [2]string{s[1], s[2]})
		}
		return segs, true
	}
	return nil, false
}

// ostreamFloat prints w as C++'s default ostream does (6 significant digits, %g).
func ostreamFloat(w float32) string {
	return strconv.FormatFloat(float64(w), 'g', 6, 32)
}

// compareParsed compares text.ParseAttention's segments for prompt with sd-cli's log of them; a mismatch
// names the first token whose weight differs.
func compareParsed(tok *text.CLIPTokenizer, prompt, log string) error {
	theirs, ok := sdcliSegments(prompt, log)
	if !ok {
		return fmt.Errorf("sd-cli's log has no parse line for %q", prompt)
	}
	ours := text.ParseAttention(prompt)
	type tw struct{ token, weight string }
	tokens := func(segText, w string) []tw {
		var out []tw
		for _, id := range tok.Encode(segText) {
			out = append(out, tw{tok.Token(id), w})
		}
		if segText == "BREAK" && w == ostreamFloat(text.BreakWeight) {
			out = []tw{{"BREAK", w}}
		}
		return out
	}
	var a, b []tw
	for _, s := range ours {
		a = append(a, tokens(s.Text, ostreamFloat(s.Weight))...)
	}
	for _, s := range theirs {
		b = append(b, tokens(s[0], s[1])...)
	}
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return fmt.Errorf("%q: token %d: sdtool %q at %s, sd-cli %q at %s (sdtool %v, sd-cli %v)", prompt, i, a[i].token, a[i].weight, b[i].token, b[i].weight, ours, theirs)
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("%q: sdtool parses %d tokens, sd-cli %d (sdtool %v, sd-cli %v)", prompt, len(a), len(b), ours, theirs)
	}
	return nil
}

// TestCompareParsedNamesToken checks the log reader on lines as sd-cli writes them: equal segments pass, and
// a weight that differs is reported with its token.
func TestCompareParsedNamesToken(t *testing.T) {
	if _, err := os.Stat(parityMerges); err != nil {
		t.Skipf("no CLIP vocabulary at %s", parityMerges)
	}
	tok, err := text.LoadCLIPTokenizer(parityMerges)
	if err != nil {
		t.Fatal(err)
	}
	const prompt = `a ((sofa)) BREAK \(x\)`
	good := "[DEBUG] conditioner.hpp:372 - parse '" + prompt + `' to [['a ', 1], ['sofa', 1.21], [' ', 1], ['BREAK', -1], [' (x\)', 1], ]`
	if err := compareParsed(tok, prompt, good); err != nil {
		t.Fatalf("equal parses: %v", err)
	}
	bad := strings.Replace(good, "1.21", "1.1", 1)
	if err := compareParsed(tok, prompt, bad); err == nil || !strings.Contains(err.Error(), `"sofa</w>" at 1.21`) {
		t.Fatalf("a differing weight: %v", err)
	}
	if err := compareParsed(tok, "other", good); err == nil {
		t.Fatal("a prompt sd-cli did not log passed")
	}
}
