package text

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// CLIPMergesKey is the GGUF / safetensors metadata key under which sdtool embeds a CLIP tokenizer in a
// model file: a string holding the merges text exactly as merges.txt has it (optional "#version" line, then
// one "left right" pair per line). The vocabulary is derived from the merges as CLIP does (see
// NewCLIPTokenizerFromMerges), so the merges alone define the tokenizer. A GGUF string array with one merge per
// element is accepted too.
const CLIPMergesKey = "sdtool.tokenizer.clip.merges"

// ErrNoTokenizer is returned when a model's metadata carries no tokenizer.
var ErrNoTokenizer = errors.New("no tokenizer in the model metadata")

// maxTokenizerFile bounds what the loaders read: CLIP's tokenizer.json is about 3.5 MB.
const maxTokenizerFile = 64 << 20

// LoadCLIPTokenizer reads a CLIP tokenizer from path: a Hugging Face tokenizer.json (any *.json file), a folder
// holding tokenizer.json or vocab.json and merges.txt (a tokenizer/ subfolder of a diffusers model works),
// or a bare merges file (merges.txt, or the merges text of any other name), whose vocabulary is built as
// CLIP builds it.
func LoadCLIPTokenizer(path string) (*CLIPTokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return loadTokenizerDir(path)
	}
	data, err := readTokenizerFile(path)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return ParseCLIPTokenizerJSON(path, data)
	}
	merges, err := ParseMerges(path, string(data))
	if err != nil {
		return nil, err
	}
	t, err := NewCLIPTokenizerFromMerges(merges)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// loadTokenizerDir loads tokenizer.json, or vocab.json with merges.txt, from dir (or from dir/tokenizer).
func loadTokenizerDir(dir string) (*CLIPTokenizer, error) {
	for _, d := range []string{dir, filepath.Join(dir, "tokenizer")} {
		if p := filepath.Join(d, "tokenizer.json"); fileExists(p) {
			data, err := readTokenizerFile(p)
			if err != nil {
				return nil, err
			}
			return ParseCLIPTokenizerJSON(p, data)
		}
		vp, mp := filepath.Join(d, "vocab.json"), filepath.Join(d, "merges.txt")
		if fileExists(vp) && fileExists(mp) {
			vdata, err := readTokenizerFile(vp)
			if err != nil {
				return nil, err
			}
			mdata, err := readTokenizerFile(mp)
			if err != nil {
				return nil, err
			}
			var vocab map[string]int
			if err := json.Unmarshal(vdata, &vocab); err != nil {
				return nil, fmt.Errorf("%s: %w: %v", vp, ErrTokenizer, err)
			}
			merges, err := ParseMerges(mp, string(mdata))
			if err != nil {
				return nil, err
			}
			t, err := NewCLIPTokenizer(vocab, merges)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d, err)
			}
			return t, nil
		}
	}
	return nil, fmt.Errorf("%s: %w: no tokenizer.json and no vocab.json with merges.txt", dir, ErrTokenizer)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func readTokenizerFile(p string) ([]byte, error) {
	return readBounded(p, maxTokenizerFile, ErrTokenizer)
}

// readBounded reads the whole regular file at path, refusing one larger
// than limit bytes with an error that wraps the loader's sentinel.
func readBounded(path string, limit int64, sentinel error) ([]byte, error) {
	f, _, err := formats.OpenRegular(path, math.MaxInt64) // the bound below names the sentinel
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes is too large for a tokenizer file", path, sentinel, st.Size())
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// hfTokenizerJSON is the part of a Hugging Face tokenizer.json that a CLIP BPE model needs.
type hfTokenizerJSON struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Model struct {
		Type            string          `json:"type"`
		Vocab           map[string]int  `json:"vocab"`
		Merges          json.RawMessage `json:"merges"`
		EndOfWordSuffix *string         `json:"end_of_word_suffix"`
	} `json:"model"`
}

// ParseCLIPTokenizerJSON parses a Hugging Face tokenizer.json holding a CLIP BPE model (model.vocab and
// model.merges, the latter as "left right" strings or as [left, right] pairs); tokens listed in
// added_tokens join the vocabulary when model.vocab lacks them. source names the input in errors.
func ParseCLIPTokenizerJSON(source string, data []byte) (*CLIPTokenizer, error) {
	var doc hfTokenizerJSON
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", source, ErrTokenizer, err)
	}
	if doc.Model.Type != "" && doc.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: %w: model type %q, want BPE", source, ErrTokenizer, doc.Model.Type)
	}
	if doc.Model.EndOfWordSuffix != nil && *doc.Model.EndOfWordSuffix != endOfWord {
		return nil, fmt.Errorf("%s: %w: end_of_word_suffix %q, CLIP uses %q", source, ErrTokenizer, *doc.Model.EndOfWordSuffix, endOfWord)
	}
	if len(doc.Model.Vocab) == 0 {
		return nil, fmt.Errorf("%s: %w: model.vocab is missing or empty", source, ErrTokenizer)
	}
	vocab := doc.Model.Vocab
	for _, at := range doc.AddedTokens {
		if _, ok := vocab[at.Content]; !ok {
			vocab[at.Content] = at.ID
		}
	}
	var merges [][2]string
	var asStrings []string
	if err := json.Unmarshal(doc.Model.Merges, &asStrings); err == nil {
		for i, m := range asStrings {
			l, r, ok := strings.Cut(m, " ")
			if !ok || l == "" || r == "" || strings.Contains(r, " ") {
				return nil, fmt.Errorf("%s: %w: model.merges[%d] %q is not two symbols separated by one space", source, ErrTokenizer, i, m)
			}
			merges = append(merges, [2]string{l, r})
		}
	} else {
		var asPairs [][]string
		if err := json.Unmarshal(doc.Model.Merges, &asPairs); err != nil {
			return nil, fmt.Errorf("%s: %w: model.merges is neither a list of strings nor of pairs", source, ErrTokenizer)
		}
		for i, p := range asPairs {
			if len(p) != 2 || p[0] == "" || p[1] == "" {
				return nil, fmt.Errorf("%s: %w: model.merges[%d] is not a pair of symbols", source, ErrTokenizer, i)
			}
			merges = append(merges, [2]string{p[0], p[1]})
		}
	}
	if len(merges) == 0 {
		return nil, fmt.Errorf("%s: %w: model.merges is missing or empty", source, ErrTokenizer)
	}
	t, err := NewCLIPTokenizer(vocab, merges)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return t, nil
}

// CLIPTokenizerFromMetadata builds the tokenizer embedded under CLIPMergesKey; it returns ErrNoTokenizer
// when the key is absent. source (usually the model path) names the input in errors.
func CLIPTokenizerFromMetadata(source string, md formats.Metadata) (*CLIPTokenizer, error) {
	kv, ok := md.Get(CLIPMergesKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w (key %s)", source, ErrNoTokenizer, CLIPMergesKey)
	}
	var merges [][2]string
	var err error
	switch v := kv.Value.(type) {
	case string:
		merges, err = ParseMerges(source+": "+CLIPMergesKey, v)
	case formats.Array:
		lines, ok := v.Values.([]string)
		if !ok {
			return nil, fmt.Errorf("%s: %s: %w: array of %s, want strings", source, CLIPMergesKey, ErrTokenizer, v.Elem)
		}
		merges, err = ParseMerges(source+": "+CLIPMergesKey, strings.Join(lines, "\n"))
	default:
		return nil, fmt.Errorf("%s: %s: %w: value of type %s, want a string", source, CLIPMergesKey, ErrTokenizer, kv.Type)
	}
	if err != nil {
		return nil, err
	}
	t, err := NewCLIPTokenizerFromMerges(merges)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", source, CLIPMergesKey, err)
	}
	return t, nil
}
