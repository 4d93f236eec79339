package text

import (
	"encoding/binary"
	"fmt"
	"math"
)

// maxUnigramFile bounds what the unigram readers load: UMT5's spiece.model is about 4.5 MB and its
// tokenizer.json about 16 MB.
const maxUnigramFile = 256 << 20

// spmModelTypeUnigram is TrainerSpec.ModelType UNIGRAM; 2 is BPE, 3 WORD, 4 CHAR.
const spmModelTypeUnigram = 1

// spmTrainer holds the TrainerSpec fields encoding needs, with the proto's defaults.
type spmTrainer struct {
	modelType               uint64
	treatWhitespaceAsSuffix bool
	byteFallback            bool
	bosPiece, eosPiece      string
	padPiece                string
}

// spmNormalizer holds the NormalizerSpec fields encoding needs, with the proto's defaults (the rule's name,
// "nmt_nfkc" for T5, only says how the charsmap was made).
type spmNormalizer struct {
	charsMap               []byte
	addDummyPrefix         bool
	removeExtraWhitespaces bool
	escapeWhitespaces      bool
}

// ReadSentencePieceModel reads a SentencePiece model file (T5's spiece.model, a tokenizer.model) holding a
// unigram model. Errors name the file.
func ReadSentencePieceModel(path string) (*UnigramTokenizer, error) {
	data, err := readUnigramFile(path)
	if err != nil {
		return nil, err
	}
	return ParseSentencePieceModel(path, data)
}

// ParseSentencePieceModel decodes a serialized SentencePiece ModelProto: the pieces with their scores and
// types, the trainer spec (model type, byte fallback, whitespace as suffix, and the names of <s>, </s> and
// <pad>) and the normalizer spec (precompiled charsmap, dummy prefix, extra-whitespace removal, whitespace
// escaping). Only unigram models are accepted. As T5's tokenizer does, Encode appends </s> when the model
// has that control piece; <s> is never added. source names the input in errors.
func ParseSentencePieceModel(source string, data []byte) (*UnigramTokenizer, error) {
	tr := spmTrainer{modelType: spmModelTypeUnigram, bosPiece: "<s>", eosPiece: "</s>", padPiece: "<pad>"}
	nm := spmNormalizer{addDummyPrefix: true, removeExtraWhitespaces: true, escapeWhitespaces: true}
	var pieces []UnigramPiece
	err := pbFields(data, func(num int, wt int, v uint64, b []byte) error {
		switch num {
		case 1: // pieces
			if wt != pbBytes {
				return pbWrongType("pieces", wt)
			}
			p, err := parseSPMPiece(b)
			if err != nil {
				return fmt.Errorf("piece %d: %v", len(pieces), err)
			}
			pieces = append(pieces, p)
		case 2: // trainer_spec
			if wt != pbBytes {
				return pbWrongType("trainer_spec", wt)
			}
			if err := parseSPMTrainer(b, &tr); err != nil {
				return fmt.Errorf("trainer_spec: %v", err)
			}
		case 3: // normalizer_spec
			if wt != pbBytes {
				return pbWrongType("normalizer_spec", wt)
			}
			if err := parseSPMNormalizer(b, &nm); err != nil {
				return fmt.Errorf("normalizer_spec: %v", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w: sentencepiece model: %v", source, ErrUnigram, err)
	}
	if len(pieces) == 0 {
		return nil, fmt.Errorf("%s: %w: sentencepiece model has no pieces (is it a SentencePiece model file?)", source, ErrUnigram)
	}
	if tr.modelType != spmModelTypeUnigram {
		names := map[uint64]string{2: "BPE", 3: "WORD", 4: "CHAR"}
		name := names[tr.modelType]
		if name == "" {
			name = fmt.Sprint(tr.modelType)
		}
		return nil, fmt.Errorf("%s: %w: sentencepiece model type is %s: %w", source, ErrUnigram, name, errNotUnigramModel)
	}
	spec := UnigramSpec{
		Pieces:                  pieces,
		UnkID:                   -1,
		PrecompiledCharsMap:     nm.charsMap,
		AddDummyPrefix:          nm.addDummyPrefix,
		RemoveExtraWhitespaces:  nm.removeExtraWhitespaces,
		EscapeWhitespaces:       nm.escapeWhitespaces,
		TreatWhitespaceAsSuffix: tr.treatWhitespaceAsSuffix,
		ByteFallback:            tr.byteFallback,
	}
	for i, p := range pieces {
		if p.Type == PieceUnknown && spec.UnkID < 0 {
			spec.UnkID = int32(i)
		}
	}
	// SentencePiece finds <s>, </s> and <pad> by their piece names and only counts control pieces.
	spec.BOSID = spmControlID(pieces, tr.bosPiece)
	spec.EOSID = spmControlID(pieces, tr.eosPiece)
	spec.PadID = spmControlID(pieces, tr.padPiece)
	spec.AddEOS = spec.EOSID >= 0
	t, err := NewUnigramTokenizer(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: sentencepiece model: %w", source, err)
	}
	return t, nil
}

// spmControlID returns the id of the control piece named name, or -1.
func spmControlID(pieces []UnigramPiece, name string) int32 {
	for i, p := range pieces {
		if p.Text == name && p.Type == PieceControl {
			return int32(i)
		}
	}
	return -1
}

// parseSPMPiece decodes a ModelProto.SentencePiece message.
func parseSPMPiece(data []byte) (UnigramPiece, error) {
	p := UnigramPiece{Type: PieceNormal}
	err := pbFields(data, func(num int, wt int, v uint64, b []byte) error {
		switch num {
		case 1:
			if wt != pbBytes {
				return pbWrongType("piece", wt)
			}
			p.Text = string(b)
		case 2:
			if wt != pbFixed32 {
				return pbWrongType("score", wt)
			}
			p.Score = math.Float32frombits(uint32(v))
		case 3:
			if wt != pbVarint {
				return pbWrongType("type", wt)
			}
			p.Type = PieceType(int32(v))
		}
		return nil
	})
	return p, err
}

// parseSPMTrainer decodes the TrainerSpec fields encoding needs into tr.
func parseSPMTrainer(data []byte, tr *spmTrainer) error {
	return pbFields(data, func(num int, wt int, v uint64, b []byte) error {
		var err error
		switch num {
		case 3:
			tr.modelType, err = pbVarintField("model_type", wt, v)
		case 24:
			tr.treatWhitespaceAsSuffix, err = pbBoolField("treat_whitespace_as_suffix", wt, v)
		case 35:
			tr.byteFallback, err = pbBoolField("byte_fallback", wt, v)
		case 46:
			tr.bosPiece, err = pbStringField("bos_piece", wt, b)
		case 47:
			tr.eosPiece, err = pbStringField("eos_piece", wt, b)
		case 48:
			tr.padPiece, err = pbStringField("pad_piece", wt, b)
		}
		return err
	})
}

// parseSPMNormalizer decodes a NormalizerSpec into nm.
func parseSPMNormalizer(data []byte, nm *spmNormalizer) error {
	return pbFields(data, func(num int, wt int, v uint64, b []byte) error {
		var err error
		switch num {
		case 2:
			if wt != pbBytes {
				return pbWrongType("precompiled_charsmap", wt)
			}
			nm.charsMap = append([]byte(nil), b...)
		case 3:
			nm.addDummyPrefix, err = pbBoolField("add_dummy_prefix", wt, v)
		case 4:
			nm.removeExtraWhitespaces, err = pbBoolField("remove_extra_whitespaces", wt, v)
		case 5:
			nm.escapeWhitespaces, err = pbBoolField("escape_whitespaces", wt, v)
		}
		return err
	})
}

// Protocol-buffer wire types.
const (
	pbVarint  = 0
	pbFixed64 = 1
	pbBytes   = 2
	pbFixed32 = 5
)

// pbFields walks the fields of one serialized message, calling fn with each field's number, wire type,
// and its value: v for varint and fixed-size fields, b for length-delimited ones (a sub-slice of data).
// Groups (wire types 3 and 4, unused since proto2's early days) are refused.
func pbFields(data []byte, fn func(num int, wt int, v uint64, b []byte) error) error {
	for off := 0; off < len(data); {
		key, n := binary.Uvarint(data[off:])
		if n <= 0 {
			return fmt.Errorf("bad field key at offset %d", off)
		}
		off += n
		num, wt := key>>3, int(key&7)
		if num == 0 || num > 1<<29-1 {
			return fmt.Errorf("field number %d at offset %d is out of range", num, off-n)
		}
		var v uint64
		var b []byte
		switch wt {
		case pbVarint:
			v, n = binary.Uvarint(data[off:])
			if n <= 0 {
				return fmt.Errorf("field %d: bad varint at offset %d", num, off)
			}
			off += n
		case pbFixed64:
			if len(data)-off < 8 {
				return fmt.Errorf("field %d: fixed64 cut short at offset %d", num, off)
			}
			v = binary.LittleEndian.Uint64(data[off:])
			off += 8
		case pbFixed32:
			if len(data)-off < 4 {
				return fmt.Errorf("field %d: fixed32 cut short at offset %d", num, off)
			}
			v = uint64(binary.LittleEndian.Uint32(data[off:]))
			off += 4
		case pbBytes:
			l, n := binary.Uvarint(data[off:])
			if n <= 0 {
				return fmt.Errorf("field %d: bad length at offset %d", num, off)
			}
			off += n
			if l > uint64(len(data)-off) {
				return fmt.Errorf("field %d: length %d at offset %d runs past the end (%d bytes left)", num, l, off, len(data)-off)
			}
			b = data[off : off+int(l)]
			off += int(l)
		default:
			return fmt.Errorf("field %d: unsupported wire type %d at offset %d", num, wt, off-n)
		}
		if err := fn(int(num), wt, v, b); err != nil {
			return err
		}
	}
	return nil
}

func pbWrongType(field string, wt int) error {
	return fmt.Errorf("field %s has wire type %d", field, wt)
}

func pbVarintField(field string, wt int, v uint64) (uint64, error) {
	if wt != pbVarint {
		return 0, pbWrongType(field, wt)
	}
	return v, nil
}

func pbBoolField(field string, wt int, v uint64) (bool, error) {
	if wt != pbVarint {
		return false, pbWrongType(field, wt)
	}
	return v != 0, nil
}

func pbStringField(field string, wt int, b []byte) (string, error) {
	if wt != pbBytes {
		return "", pbWrongType(field, wt)
	}
	return string(b), nil
}

// readUnigramFile reads a whole tokenizer file of bounded size.
func readUnigramFile(path string) ([]byte, error) {
	return readBounded(path, maxUnigramFile, ErrUnigram)
}
