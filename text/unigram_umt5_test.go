package text

import (
	"os"
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
