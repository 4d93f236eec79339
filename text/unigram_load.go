package text

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// errNotUnigramModel marks a well-formed tokenizer of another algorithm (BPE, WordPiece), which a folder
// search passes over.
var errNotUnigramModel = errors.New("not a unigram model")

// unigramDirs are the folders LoadUnigram searches under a folder, after the folder itself: diffusers keeps
// T5's tokenizer in tokenizer_2 (Flux) or tokenizer_3 (SD3), and CLIP's in tokenizer.
var unigramDirs = []string{"", "tokenizer_2", "tokenizer_3", "tokenizer"}

// unigramFiles are the file names LoadUnigram tries in a folder, SentencePiece's own model first since it
// is what the reference implementation reads.
var unigramFiles = []string{"spiece.model", "tokenizer.model", "tokenizer.json"}

// LoadUnigram reads a unigram tokenizer from path: a SentencePiece model (spiece.model, tokenizer.model),
// a Hugging Face tokenizer.json (a *.json file, or any file starting with "{"), or a folder holding one of
// them. In a folder, spiece.model, tokenizer.model and tokenizer.json are tried in that order, in the
// folder and then in its tokenizer_2, tokenizer_3 and tokenizer subfolders, so a diffusers Flux or SD3
// folder finds T5's tokenizer; files of another algorithm (CLIP's BPE tokenizer.json) are passed over.
func LoadUnigram(path string) (*UnigramTokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return loadUnigramFile(path)
	}
	var passed []string
	for _, sub := range unigramDirs {
		for _, name := range unigramFiles {
			p := filepath.Join(path, sub, name)
			if st, err := os.Stat(p); err != nil || st.IsDir() {
				continue
			}
			t, err := loadUnigramFile(p)
			if errors.Is(err, errNotUnigramModel) {
				passed = append(passed, err.Error())
				continue
			}
			return t, err
		}
	}
	msg := "no spiece.model, tokenizer.model or tokenizer.json in it or in its tokenizer_2, tokenizer_3 or tokenizer folder"
	if len(passed) > 0 {
		msg = "no unigram tokenizer; passed over " + strings.Join(passed, "; ")
	}
	return nil, fmt.Errorf("%s: %w: %s", path, ErrUnigram, msg)
}

// loadUnigramFile reads one tokenizer file, telling JSON from a protobuf by its name or first byte.
func loadUnigramFile(path string) (*UnigramTokenizer, error) {
	data, err := readUnigramFile(path)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(filepath.Ext(path), ".json") || bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) {
		return ParseUnigramJSON(path, data)
	}
	return ParseSentencePieceModel(path, data)
}
