//go:build cgo

package inferutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/sdtool/sdtool/internal/longtest"
	"github.com/sdtool/sdtool/text"
)

// qwenMerges finds how many Qwen merges sd-cli has built in: it prints them
// when it makes its tokenizer, which it does before it checks the weights,
// so a tiny model (which sd.cpp need not be able to run) is enough.
var qwenMerges = regexp.MustCompile(`merges size (\d+)`)

// SDCLIQwen returns sd-cli's path and Qwen's real tokenizer
// (SDTOOL_QWEN_TOKENIZER) numbered as that sd-cli numbers it, skipping
// without either and, in a test, outside the long tests (what names the
// test). model writes a tiny model of the family under dir and returns the
// sd-cli arguments that name it.
//
// sd.cpp builds its Qwen vocabulary from its built-in merges (bytes, one
// token per merge, then the control tokens); the shared build loses the
// last merge to a missing trailing newline, so every control token's id
// there is one lower than in tokenizer.json. The comparison is of the
// programs, not of their vocabularies, so sdtool gets sd-cli's numbering.
func SDCLIQwen(tb testing.TB, what string, model func(dir string) []string) (string, *text.ByteBPEVocab) {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		longtest.Skip(t, what)
	}
	bin := os.Getenv("SDTOOL_SDCLI")
	if bin == "" {
		tb.Skip("SDTOOL_SDCLI is not set (the path of stable-diffusion.cpp's sd-cli)")
	}
	RequireParityBuild(tb)
	path := os.Getenv("SDTOOL_QWEN_TOKENIZER")
	if path == "" {
		tb.Skip("SDTOOL_QWEN_TOKENIZER is not set (Qwen's tokenizer.json: ../shared/tools/qwen-tokenizer prints one)")
	}
	v, err := text.LoadByteBPE(path)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	args := append(model(dir), "-p", "", "-W", "16", "-H", "16", "--steps", "1", "-o", filepath.Join(dir, "x.png"), "-v")
	log, _ := exec.Command(bin, args...).CombinedOutput()
	m := qwenMerges.FindSubmatch(log)
	if m == nil {
		tb.Fatalf("sd-cli did not say how many Qwen merges it has:\n%s", Tail(log))
	}
	n, _ := strconv.Atoi(string(m[1]))
	if n == len(v.Merges) {
		return bin, v
	}
	if n > len(v.Merges) || len(v.Tokens) < 256+len(v.Merges) {
		tb.Fatalf("sd-cli has %d Qwen merges, the tokenizer %d", n, len(v.Merges))
	}
	tb.Logf("sd-cli has %d of the tokenizer's %d merges: sdtool numbers the tokens as sd-cli does", n, len(v.Merges))
	out := *v
	out.Merges = v.Merges[:n]
	// Token 256+i is merge i's; the ones of the lost merges go, the control tokens move down.
	out.Tokens = append(append([]string(nil), v.Tokens[:256+n]...), v.Tokens[256+len(v.Merges):]...)
	out.Types = append(append([]int32(nil), v.Types[:256+n]...), v.Types[256+len(v.Merges):]...)
	return bin, &out
}
