package text

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// umt5Sentinel matches the sentinels written in the published UMT5 texts.
var umt5Sentinel = regexp.MustCompile(`<extra_id_(\d+)>`)

// TestUnigramUMT5Published checks UMT5's vocabulary (Wan's text encoder; 256k pieces, too large to commit)
// when SDTOOL_UMT5_TOKENIZER names its spiece.model, tokenizer.json or folder (google/umt5-xxl; umt5-small
// shares it). The published ids (testdata/umt5/published_ids.jsonl, from transformers' UMT5 integration
// test) contain sentinels, which transformers' slow tokenizer splits out before SentencePiece: <extra_id_N>
// is id 256299-N, the text before the first sentinel is encoded as usual, and each text after one is encoded
// as SentencePiece("<unk>" + text) without the dummy prefix, dropping the pieces of "<unk>" (its legacy=False
// rule, which keeps a leading space as ▁). The test rebuilds that split around Tokenize.
func TestUnigramUMT5Published(t *testing.T) {
	path := os.Getenv("SDTOOL_UMT5_TOKENIZER")
	if path == "" {
		t.Skip("SDTOOL_UMT5_TOKENIZER is not set")
	}
	tok, err := LoadUnigram(path)
	if err != nil {
		t.Fatal(err)
	}
	// stable-diffusion.cpp's T5UniGramTokenizer(is_umt5) uses these ids.
	if tok.PadID() != 0 || tok.EOSID() != 1 || tok.BOSID() != 2 || tok.UnkID() != 3 || tok.VocabSize() < 256000 {
		t.Errorf("pad %d eos %d bos %d unk %d, %d pieces; want 0 1 2 3 and at least 256000",
			tok.PadID(), tok.EOSID(), tok.BOSID(), tok.UnkID(), tok.VocabSize())
	}
	spec := tok.Spec()
	spec.AddDummyPrefix = false
	noPrefix := mustTokenizer(t, spec)
	unkPrefix := noPrefix.Tokenize("<unk>")
	for _, r := range readPublishedRows(t, "testdata/umt5/published_ids.jsonl") {
		parts := umt5Sentinel.Split(r.Text, -1)
		sentinels := umt5Sentinel.FindAllStringSubmatch(r.Text, -1)
		var got []int32
		for i, part := range parts {
			if i == 0 {
				got = append(got, tok.Tokenize(part)...)
			} else {
				ids := noPrefix.Tokenize("<unk>" + part)
				if !slices.Equal(ids[:min(len(ids), len(unkPrefix))], unkPrefix) {
					t.Fatalf("%q: the pieces of <unk> do not lead those of <unk>%s", r.Text, part)
				}
				got = append(got, ids[len(unkPrefix):]...)
			}
			if i < len(sentinels) {
				n, _ := strconv.Atoi(sentinels[i][1])
				got = append(got, int32(256299-n))
			}
		}
		got = append(got, tok.EOSID())
		if !slices.Equal(got, *r.IDs) {
			t.Errorf("%q:\n got %v\nwant %v", r.Text, got, *r.IDs)
		}
	}
}

// wanPrompts are prompts people give Wan, in the languages UMT5 was trained on, with Wan's own default
// negative prompt (Chinese) among them.
var wanPrompts = []string{
	"a lovely cat",
	"A cinematic shot of a red fox running through fresh snow at dawn, slow motion, 4k",
	"一只橘猫坐在窗台上，阳光明媚",
	"色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，丑陋的，残缺的",
	"Un chat qui saute sur une table en bois, lumière douce",
	"Ein Hund läuft über eine Wiese, Zeitlupe",
	"猫がゆっくりと歩いている、桜の花びらが舞う",
	"고양이가 창가에 앉아 있다",
	"Кошка играет с клубком ниток",
	"قطة تجلس على النافذة",
	"एक बिल्ली खिड़की पर बैठी है",
	"  leading and trailing spaces  ",
	"(masterpiece:1.2), best quality, <extra_id_0>, 3.14 — “quotes”",
}

// TestUnigramUMT5AgainstSPMEncode holds sdtool's UMT5 tokenizer to SentencePiece's own encoder (spm_encode,
// Debian's sentencepiece package) on Wan prompts and on random lines of tricky characters, when
// SDTOOL_UMT5_TOKENIZER names UMT5's spiece.model (or a folder holding it): an oracle that needs no
// committed ids, since the 256k-piece vocabulary cannot be committed.
func TestUnigramUMT5AgainstSPMEncode(t *testing.T) {
	path := os.Getenv("SDTOOL_UMT5_TOKENIZER")
	if path == "" {
		t.Skip("SDTOOL_UMT5_TOKENIZER is not set")
	}
	spmEncode := lookPath("spm_encode")
	if spmEncode == "" {
		t.Skip("spm_encode not installed (apt-get install sentencepiece)")
	}
	model := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		model = filepath.Join(path, "spiece.model")
	}
	if filepath.Ext(model) != ".model" {
		t.Skipf("%s is not a spiece.model, which spm_encode needs", path)
	}
	tok, err := LoadUnigram(model)
	if err != nil {
		t.Fatal(err)
	}
	lines := append(slices.Clone(wanPrompts), spmTestLines(2000)...)
	got, err := runSPMEncode(spmEncode, model, lines)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, line := range lines {
		if want := tok.Tokenize(line); !slices.Equal(got[i], want) {
			bad++
			if bad <= 10 {
				t.Errorf("line %d %q: spm_encode %v, sdtool %v", i, line, got[i], want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d lines differ", bad, len(lines))
	}
}
