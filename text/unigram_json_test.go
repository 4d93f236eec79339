package text

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// t5JSONFromSkeleton fills a committed skeleton of a real tokenizer.json (the pipeline, added tokens and
// post-processor exactly as published, with the vocabulary and the charsmap cut out to save 600 KB) with
// the pieces and charsmap of T5's spiece.model, which are the ones the full file holds.
func t5JSONFromSkeleton(t *testing.T, skeleton string) []byte {
	t.Helper()
	data, err := os.ReadFile(skeleton)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	spec := t5Tokenizer(t).Spec()
	vocab := make([][2]any, 0, len(spec.Pieces)+100)
	for _, p := range spec.Pieces {
		vocab = append(vocab, [2]any{p.Text, float64(p.Score)})
	}
	for i := 99; i >= 0; i-- { // the sentinels follow the 32000 pieces, <extra_id_99> first
		vocab = append(vocab, [2]any{"<extra_id_" + strconv.Itoa(i) + ">", 0.0})
	}
	doc["model"].(map[string]any)["vocab"] = vocab
	norms := doc["normalizer"].(map[string]any)["normalizers"].([]any)
	norms[0].(map[string]any)["precompiled_charsmap"] = base64.StdEncoding.EncodeToString(spec.PrecompiledCharsMap)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUnigramJSONSkeletons(t *testing.T) {
	rows := readPublishedRows(t, "testdata/t5/published_ids.jsonl")
	spm := t5Tokenizer(t).Spec()
	for _, sk := range []string{"testdata/t5/flux1_tokenizer_2.skeleton.json", "testdata/t5/sd3_tokenizer_3.skeleton.json"} {
		t.Run(sk, func(t *testing.T) {
			tok, err := ParseUnigramJSON(sk, t5JSONFromSkeleton(t, sk))
			if err != nil {
				t.Fatal(err)
			}
			spec := tok.Spec()
			if len(spec.Pieces) != 32100 {
				t.Fatalf("%d pieces, want 32100", len(spec.Pieces))
			}
			for i, p := range spec.Pieces[:32000] {
				if p != spm.Pieces[i] {
					t.Fatalf("piece %d is %+v, spiece.model has %+v", i, p, spm.Pieces[i])
				}
			}
			if p := spec.Pieces[32099]; p.Text != "<extra_id_0>" || p.Type != PieceControl {
				t.Errorf("piece 32099 is %+v, want the control piece <extra_id_0>", p)
			}
			if spec.UnkID != 2 || spec.EOSID != 1 || spec.PadID != 0 || spec.BOSID != -1 || !spec.AddEOS || spec.AddBOS {
				t.Errorf("special ids unk %d eos %d pad %d bos %d add eos %v bos %v, want 2 1 0 -1 true false",
					spec.UnkID, spec.EOSID, spec.PadID, spec.BOSID, spec.AddEOS, spec.AddBOS)
			}
			if spec.AddDummyPrefix != spm.AddDummyPrefix || spec.RemoveExtraWhitespaces != spm.RemoveExtraWhitespaces ||
				spec.EscapeWhitespaces != spm.EscapeWhitespaces || spec.ByteFallback || spec.TreatWhitespaceAsSuffix {
				t.Errorf("whitespace rules %+v differ from spiece.model's", spec)
			}
			checkPublishedRows(t, tok, rows)
		})
	}
}

// TestUnigramJSONRealFile reads a complete tokenizer.json named by SDTOOL_T5_TOKENIZER_JSON (for example
// tokenizer_2/tokenizer.json of black-forest-labs/FLUX.1-dev) and checks it against the published ids.
func TestUnigramJSONRealFile(t *testing.T) {
	path := os.Getenv("SDTOOL_T5_TOKENIZER_JSON")
	if path == "" {
		t.Skip("SDTOOL_T5_TOKENIZER_JSON is not set")
	}
	tok, err := LoadUnigram(path)
	if err != nil {
		t.Fatal(err)
	}
	checkPublishedRows(t, tok, readPublishedRows(t, "testdata/t5/published_ids.jsonl"))
}

// tinyJSON is a minimal valid unigram tokenizer.json.
const tinyJSON = `{
 "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "</s>", "special": true}],
 "normalizer": null,
 "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": true},
 "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
   {"SpecialToken": {"id": "</s>", "type_id": 0}}], "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
 "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["</s>", 0], ["▁", -1], ["a", -2], ["b", -2], ["▁ab", -1.5]]}
}`

func TestUnigramJSONTiny(t *testing.T) {
	tok, err := ParseUnigramJSON("tiny.json", []byte(tinyJSON))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"", []int32{1}},
		{"ab", []int32{5, 1}},
		{"ab ab", []int32{5, 5, 1}},
		{"ba", []int32{2, 4, 3, 1}},
		{"c", []int32{2, 0, 1}},
		{"cd", []int32{2, 0, 1}},
		{"a c b", []int32{2, 3, 2, 0, 2, 4, 1}},
	} {
		if got := tok.Encode(c.text); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

func TestUnigramJSONErrors(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(tinyJSON, old) {
			t.Fatalf("tinyJSON lacks %q", old)
		}
		return strings.Replace(tinyJSON, old, new, 1)
	}
	for _, c := range []struct {
		name, doc, want string
	}{
		{"not json", `{"model": `, "unexpected end"},
		{"bpe", edit(`"type": "Unigram"`, `"type": "BPE"`), "model type is BPE: not a unigram model"},
		{"no vocab", edit(`"vocab": [["<unk>", 0], ["</s>", 0], ["▁", -1], ["a", -2], ["b", -2], ["▁ab", -1.5]]`, `"vocab": []`), "model.vocab is missing or empty"},
		{"bad pair", edit(`["a", -2]`, `["a"]`), "model.vocab[3] is not a [piece, score] pair"},
		{"huge score", edit(`["a", -2]`, `["a", -1e300]`), "outside float32"},
		{"no unk", edit(`"unk_id": 0,`, ``), "model.unk_id is missing"},
		{"unk range", edit(`"unk_id": 0`, `"unk_id": 9`), "model.unk_id 9 is outside the 6 pieces"},
		{"added mismatch", edit(`"content": "</s>"`, `"content": "<s>"`), `added token 1 is "<s>" but model.vocab[1] is "</s>"`},
		{"added far", edit(`"id": 1, "content": "</s>"`, `"id": 7, "content": "</s>"`), "beyond the 6 pieces"},
		{"nfkc", edit(`"normalizer": null`, `"normalizer": {"type": "NFKC"}`), `normalizer: unsupported normalizer "NFKC"`},
		{"replace", edit(`"normalizer": null`, `"normalizer": {"type": "Replace", "pattern": {"String": "x"}, "content": "y"}`), `Replace string "x"`},
		{"bad charsmap", edit(`"normalizer": null`, `"normalizer": {"type": "Precompiled", "precompiled_charsmap": "!!"}`), "not base64"},
		{"short charsmap", edit(`"normalizer": null`, `"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"}`), "too short"},
		{"split", edit(`{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}`, `{"type": "Split"}`), `unsupported pre-tokenizer "Split"`},
		{"replacement", edit(`"replacement": "▁"`, `"replacement": "_"`), `Metaspace replacement "_" is not ▁`},
		{"scheme", edit(`"add_prefix_space": true`, `"prepend_scheme": "sometimes"`), `prepend_scheme "sometimes"`},
		{"bert post", edit(`"type": "TemplateProcessing"`, `"type": "BertProcessing"`), `unsupported post-processor "BertProcessing"`},
		{"undefined special", edit(`"special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}`, `"special_tokens": {}`), `special token "</s>" is not defined`},
		{"two eos", edit(`{"SpecialToken": {"id": "</s>", "type_id": 0}}]`, `{"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}]`), "2 special tokens after"},
		{"no A", edit(`{"Sequence": {"id": "A", "type_id": 0}},`, ``), "no sequence A"},
		{"dup piece", edit(`["b", -2]`, `["a", -2]`), `piece 4 ("a") repeats piece 3`},
		{"empty piece", edit(`["b", -2]`, `["", -2]`), "piece 4 is empty"},
	} {
		_, err := ParseUnigramJSON("bad.json", []byte(c.doc))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "bad.json: ") || !errors.Is(err, ErrUnigram) {
			t.Errorf("%s: error %q, want one starting with the file name, wrapping ErrUnigram and saying %q", c.name, err, c.want)
		}
	}
}
