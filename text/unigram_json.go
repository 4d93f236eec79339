package text

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// hfAddedToken is one of a tokenizer.json's added tokens.
type hfAddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

// hfUnigramJSON is the part of a Hugging Face tokenizer.json that a unigram model needs. The pipeline
// parts are decoded one by one because their fields depend on their type.
type hfUnigramJSON struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type         string            `json:"type"`
		UnkID        *int              `json:"unk_id"`
		Vocab        []json.RawMessage `json:"vocab"`
		ByteFallback bool              `json:"byte_fallback"`
	} `json:"model"`
}

// hfComponent is one normalizer, pre-tokenizer or post-processor; only the fields of the types that a
// SentencePiece conversion produces are read.
type hfComponent struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	// Precompiled
	PrecompiledCharsMap *string `json:"precompiled_charsmap"`
	// Replace
	Pattern struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content string `json:"content"`
	// Prepend
	Prepend string `json:"prepend"`
	// Metaspace
	Replacement    *string `json:"replacement"`
	AddPrefixSpace *bool   `json:"add_prefix_space"`
	PrependScheme  *string `json:"prepend_scheme"`
	// TemplateProcessing
	Single        []json.RawMessage `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
}

// ParseUnigramJSON parses a Hugging Face tokenizer.json whose model is Unigram, as the converters of
// transformers write it for SentencePiece models (T5, UMT5, mT5), and maps its pipeline onto SentencePiece's
// rules:
//
//   - normalizer: Precompiled (the charsmap), Replace of the regex " {2,}" (runs of spaces collapse:
//     RemoveExtraWhitespaces), Strip, and Prepend("▁") (a dummy prefix), alone or in a Sequence;
//   - pre_tokenizer: Metaspace with replacement "▁" (EscapeWhitespaces; add_prefix_space or a
//     prepend_scheme other than "never" gives AddDummyPrefix), and WhitespaceSplit (RemoveExtraWhitespaces);
//   - post_processor: TemplateProcessing whose single template is [special] A [special]: the special token
//     before A is BOS, the one after it EOS (T5: A then </s>);
//   - model: vocab as [piece, score] pairs, unk_id, byte_fallback; added tokens marked special become
//     control pieces (the unknown one UNKNOWN), other added tokens user-defined, and with byte fallback the
//     <0xXX> pieces become byte pieces.
//
// Any other component is refused with an error naming it, rather than tokenizing differently from the
// model's own pipeline. Special tokens written literally in the text (</s>) are not split out as
// Hugging Face's added-token matcher does; they are tokenized as text, as SentencePiece does.
// source names the input in errors.
func ParseUnigramJSON(source string, data []byte) (*UnigramTokenizer, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w: tokenizer.json: %s", source, ErrUnigram, fmt.Sprintf(format, a...))
	}
	doc, err := readUnigramJSON(source, data, fail)
	if err != nil {
		return nil, err
	}
	spec, err := hfPieces(&doc, fail)
	if err != nil {
		return nil, err
	}
	if err := hfAddedTokens(doc.AddedTokens, &spec, fail); err != nil {
		return nil, err
	}
	spec.Pieces[spec.UnkID].Type = PieceUnknown
	if err := hfNormalizer(doc.Normalizer, &spec); err != nil {
		return nil, fail("normalizer: %v", err)
	}
	if err := hfPreTokenizer(doc.PreTokenizer, &spec); err != nil {
		return nil, fail("pre_tokenizer: %v", err)
	}
	if err := hfPostProcessor(doc.PostProcessor, &spec); err != nil {
		return nil, fail("post_processor: %v", err)
	}
	// The template names only what is added; the ids of the specials not added are found by name.
	ids := map[string]int32{}
	for i, p := range spec.Pieces {
		if _, ok := ids[p.Text]; !ok {
			ids[p.Text] = int32(i)
		}
	}
	for _, s := range []struct {
		id   *int32
		name string
	}{{&spec.BOSID, "<s>"}, {&spec.EOSID, "</s>"}, {&spec.PadID, "<pad>"}} {
		if id, ok := ids[s.name]; ok && *s.id < 0 && spec.Pieces[id].Type == PieceControl {
			*s.id = id
		}
	}
	t, err := NewUnigramTokenizer(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer.json: %w", source, err)
	}
	return t, nil
}

// jsonFail makes the error for a bad tokenizer.json.
type jsonFail func(format string, a ...any) error

// readUnigramJSON decodes a tokenizer.json whose model is a unigram one:
// the model's type decides how the rest reads, since BPE and WordPiece
// vocabularies are objects.
func readUnigramJSON(source string, data []byte, fail jsonFail) (hfUnigramJSON, error) {
	var doc hfUnigramJSON
	var head struct {
		Model struct {
			Type  string          `json:"type"`
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return doc, fail("%v", err)
	}
	// Old files have no model type; a vocabulary that is a list of pairs marks a unigram model.
	listVocab := bytes.HasPrefix(bytes.TrimSpace(head.Model.Vocab), []byte("["))
	if head.Model.Type != "Unigram" && (head.Model.Type != "" || !listVocab) {
		t := head.Model.Type
		if t == "" {
			t = "(none)"
		}
		return doc, fmt.Errorf("%s: %w: tokenizer.json: model type is %s: %w", source, ErrUnigram, t, errNotUnigramModel)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return doc, fail("%v", err)
	}
	if len(doc.Model.Vocab) == 0 {
		return doc, fail("model.vocab is missing or empty")
	}
	return doc, nil
}

// hfPieces returns a spec with the model's [piece, score] pairs (byte
// pieces typed so with byte fallback) and its unknown piece's id.
func hfPieces(doc *hfUnigramJSON, fail jsonFail) (UnigramSpec, error) {
	spec := UnigramSpec{UnkID: -1, BOSID: -1, EOSID: -1, PadID: -1, ByteFallback: doc.Model.ByteFallback}
	spec.Pieces = make([]UnigramPiece, len(doc.Model.Vocab))
	for i, raw := range doc.Model.Vocab {
		var pair []json.RawMessage
		var p UnigramPiece
		var score float64
		if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 ||
			json.Unmarshal(pair[0], &p.Text) != nil || json.Unmarshal(pair[1], &score) != nil {
			return spec, fail("model.vocab[%d] is not a [piece, score] pair", i)
		}
		if math.Abs(score) > math.MaxFloat32 {
			return spec, fail("model.vocab[%d] (%q) has score %g outside float32", i, p.Text, score)
		}
		p.Score = float32(score)
		p.Type = PieceNormal
		if spec.ByteFallback {
			if _, ok := parseBytePiece(p.Text); ok {
				p.Type = PieceByte
			}
		}
		spec.Pieces[i] = p
	}
	n := len(spec.Pieces)
	if doc.Model.UnkID == nil {
		return spec, fail("model.unk_id is missing; SentencePiece models always have an unknown piece")
	}
	if *doc.Model.UnkID < 0 || *doc.Model.UnkID >= n {
		return spec, fail("model.unk_id %d is outside the %d pieces", *doc.Model.UnkID, n)
	}
	spec.UnkID = int32(*doc.Model.UnkID)
	return spec, nil
}

// hfAddedTokens types the added tokens' pieces (special ones control,
// others user-defined), appending those that extend the vocabulary.
func hfAddedTokens(added []hfAddedToken, spec *UnigramSpec, fail jsonFail) error {
	sort.SliceStable(added, func(a, b int) bool { return added[a].ID < added[b].ID })
	for _, at := range added {
		switch {
		case at.ID < 0 || at.ID > len(spec.Pieces):
			return fail("added token %q has id %d beyond the %d pieces", at.Content, at.ID, len(spec.Pieces))
		case at.ID == len(spec.Pieces):
			// Added tokens may extend the vocabulary; they then take no part in segmentation scores.
			spec.Pieces = append(spec.Pieces, UnigramPiece{Text: at.Content})
		case spec.Pieces[at.ID].Text != at.Content:
			return fail("added token %d is %q but model.vocab[%d] is %q", at.ID, at.Content, at.ID, spec.Pieces[at.ID].Text)
		}
		p := &spec.Pieces[at.ID]
		switch {
		case p.Type == PieceByte:
		case at.Special:
			p.Type = PieceControl
		default:
			p.Type = PieceUserDefined
		}
	}
	return nil
}

// isNullJSON reports whether a raw value is absent or JSON null.
func isNullJSON(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// hfNormalizer maps a normalizer (or a Sequence of them) onto spec.
func hfNormalizer(raw json.RawMessage, spec *UnigramSpec) error {
	if isNullJSON(raw) {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Normalizers {
			if err := hfNormalizer(sub, spec); err != nil {
				return fmt.Errorf("normalizers[%d]: %v", i, err)
			}
		}
	case "Precompiled":
		if c.PrecompiledCharsMap == nil || *c.PrecompiledCharsMap == "" {
			return nil
		}
		if len(spec.PrecompiledCharsMap) > 0 {
			return fmt.Errorf("two Precompiled normalizers")
		}
		blob, err := base64.StdEncoding.DecodeString(*c.PrecompiledCharsMap)
		if err != nil {
			return fmt.Errorf("precompiled_charsmap is not base64: %v", err)
		}
		spec.PrecompiledCharsMap = blob
	case "Replace":
		// The converters collapse runs of spaces with Replace(Regex(" {2,}"), "▁" or " ").
		if c.Pattern.Regex == nil || *c.Pattern.Regex != " {2,}" || (c.Content != spmSpace && c.Content != " ") {
			return fmt.Errorf("Replace %s with %q is not SentencePiece's whitespace collapsing", hfPatternString(&c), c.Content)
		}
		spec.RemoveExtraWhitespaces = true
	case "Strip":
		// Trimming is part of SentencePiece's whitespace handling.
	case "Prepend":
		if c.Prepend != spmSpace {
			return fmt.Errorf("Prepend %q is not a dummy prefix ▁", c.Prepend)
		}
		spec.AddDummyPrefix = true
	default:
		return fmt.Errorf("unsupported normalizer %q", c.Type)
	}
	return nil
}

func hfPatternString(c *hfComponent) string {
	switch {
	case c.Pattern.Regex != nil:
		return fmt.Sprintf("regex %q", *c.Pattern.Regex)
	case c.Pattern.String != nil:
		return fmt.Sprintf("string %q", *c.Pattern.String)
	}
	return "(no pattern)"
}

// hfPreTokenizer maps a pre-tokenizer (or a Sequence of them) onto spec.
func hfPreTokenizer(raw json.RawMessage, spec *UnigramSpec) error {
	if isNullJSON(raw) {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.PreTokenizers {
			if err := hfPreTokenizer(sub, spec); err != nil {
				return fmt.Errorf("pretokenizers[%d]: %v", i, err)
			}
		}
	case "Metaspace":
		if c.Replacement != nil && *c.Replacement != spmSpace {
			return fmt.Errorf("Metaspace replacement %q is not ▁", *c.Replacement)
		}
		spec.EscapeWhitespaces = true
		prefix := true
		if c.AddPrefixSpace != nil {
			prefix = *c.AddPrefixSpace
		}
		if c.PrependScheme != nil {
			switch *c.PrependScheme {
			case "always", "first":
				prefix = true
			case "never":
				prefix = false
			default:
				return fmt.Errorf("unknown Metaspace prepend_scheme %q", *c.PrependScheme)
			}
		}
		spec.AddDummyPrefix = spec.AddDummyPrefix || prefix
	case "WhitespaceSplit":
		spec.RemoveExtraWhitespaces = true
	default:
		return fmt.Errorf("unsupported pre-tokenizer %q", c.Type)
	}
	return nil
}

// hfPostProcessor reads BOS and EOS from a TemplateProcessing post-processor.
func hfPostProcessor(raw json.RawMessage, spec *UnigramSpec) error {
	if isNullJSON(raw) {
		return nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	if c.Type != "TemplateProcessing" {
		return fmt.Errorf("unsupported post-processor %q", c.Type)
	}
	var before, after []string
	seenA := false
	for i, raw := range c.Single {
		var item struct {
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		}
		if err := json.Unmarshal(raw, &item); err != nil {
			return fmt.Errorf("single[%d]: %v", i, err)
		}
		switch {
		case item.Sequence != nil:
			if seenA || item.Sequence.ID != "A" {
				return fmt.Errorf("single[%d]: template sequence %q where one A is expected", i, item.Sequence.ID)
			}
			seenA = true
		case item.SpecialToken != nil && seenA:
			after = append(after, item.SpecialToken.ID)
		case item.SpecialToken != nil:
			before = append(before, item.SpecialToken.ID)
		default:
			return fmt.Errorf("single[%d]: neither Sequence nor SpecialToken", i)
		}
	}
	if !seenA {
		return fmt.Errorf("single template has no sequence A")
	}
	special := func(names []string, what string) (int32, bool, error) {
		switch len(names) {
		case 0:
			return -1, false, nil
		case 1:
			st, ok := c.SpecialTokens[names[0]]
			if !ok || len(st.IDs) != 1 {
				return 0, false, fmt.Errorf("special token %q is not defined with one id", names[0])
			}
			if st.IDs[0] < 0 || int(st.IDs[0]) >= len(spec.Pieces) {
				return 0, false, fmt.Errorf("special token %q has id %d outside the %d pieces", names[0], st.IDs[0], len(spec.Pieces))
			}
			return st.IDs[0], true, nil
		}
		return 0, false, fmt.Errorf("%d special tokens %s the sequence, where at most one is supported", len(names), what)
	}
	var err error
	if spec.BOSID, spec.AddBOS, err = special(before, "before"); err != nil {
		return err
	}
	if spec.EOSID, spec.AddEOS, err = special(after, "after"); err != nil {
		return err
	}
	return nil
}
