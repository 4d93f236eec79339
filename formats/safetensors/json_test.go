package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// decoder adapts encoding/json's decoder to tokenSource: the oracle for
// tokenizer.
type decoder struct{ *json.Decoder }

func (d decoder) next() (token, error) {
	tok, err := d.Token()
	if err != nil {
		return token{}, err
	}
	switch v := tok.(type) {
	case json.Delim:
		return token{kind: byte(v)}, nil
	case string:
		return token{'"', v}, nil
	case json.Number:
		return token{'0', string(v)}, nil
	case bool:
		if v {
			return token{kind: 't'}, nil
		}
		return token{kind: 'f'}, nil
	}
	return token{kind: 'n'}, nil
}

// decoderTokens is the oracle for tokenizer: encoding/json's own decoder.
func decoderTokens(b string) tokenSource { return decoder{jsonDecoder(b)} }

func jsonDecoder(b string) *json.Decoder {
	d := json.NewDecoder(strings.NewReader(b))
	d.UseNumber()
	return d
}

// Token is next as json.Decoder.Token gives it, for tokenTrace.
func (z *tokenizer) Token() (json.Token, error) {
	tok, err := z.next()
	if err != nil {
		return nil, err
	}
	return tok.json(), nil
}

// jsonTokens is json.Decoder's token API.
type jsonTokens interface {
	Token() (json.Token, error)
	More() bool
}

// tokenTrace records More and Token results until the first top-level value
// is complete or an error occurs; then it records only whether the rest is
// whitespace (json.Decoder reads a stream of values, a header is one).
func tokenTrace(src jsonTokens) []string {
	var out []string
	depth := 0
	for i := 0; i < 10000; i++ {
		more := src.More()
		tok, err := src.Token()
		if err != nil {
			if err == io.EOF && i == 0 {
				return append(out, "empty")
			}
			return append(out, "error")
		}
		out = append(out, fmt.Sprintf("%v %T %v", more, tok, tok))
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			if _, err := src.Token(); err == io.EOF {
				return append(out, "eof")
			}
			return append(out, "trailing")
		}
	}
	return append(out, "too long")
}

// tokenizerInputs are valid and broken JSON texts for the tokenizer tests.
var tokenizerInputs = []string{
	`{}`, ` { } `, `[]`, `[1,2,3]`, `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	`"str"`, `123`, `-0.5e+10`, `1E3`, `0`, `-`, `01`, `1.`, `.5`, `1e`, `+1`, `-a`,
	`{"a":"\u00e9\n\t\"\\\/"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud800"}`, `{"a":"\x"}`, `{"a":"\u12"}`,
	"{\"a\":\"\x01\"}", `{"a" 1}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a":1 "b":2}`, `{1:2}`,
	`{"a":tru}`, `{"a":truex}`, `nul`, `{"a":[1 2]}`, `{"a":1}}`, `{"a":1}]`, `[1}`, `{"a":[}`, `{"a"`,
	`{"a":`, `{"a":"`, `{"a":"\`, `{} x`, `{}{}`, "{}\x00", `{"a":1}   `, `[[[[]]]]`, `[{}, {"x": [ ] } ]`,
	"", "   ", `{"k":"v","k":"w"}`, `{"__metadata__":{"format":"pt"},"t":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`,
}

func TestTokenizerMatchesDecoder(t *testing.T) {
	for _, in := range tokenizerInputs {
		got := tokenTrace(newTokenizer(in))
		want := tokenTrace(jsonDecoder(in))
		if !slices.Equal(got, want) {
			t.Errorf("%q:\n got %q\nwant %q", in, got, want)
		}
	}
}

// checkSameAsDecoder parses b with both tokenizers and fails if they disagree.
func checkSameAsDecoder(t *testing.T, b []byte) {
	t.Helper()
	f1, err1 := parseBytes(b, "x.safetensors")
	f2, err2 := parse(bytes.NewReader(b), int64(len(b)), "x.safetensors", decoderTokens)
	if (err1 == nil) != (err2 == nil) {
		t.Fatalf("tokenizer: %v; json.Decoder: %v", err1, err2)
	}
	if err1 != nil {
		return
	}
	if !equalTensors(f1.Tensors(), f2.Tensors()) || !slices.Equal(f1.Metadata(), f2.Metadata()) ||
		!reflect.DeepEqual(f1.Info(), f2.Info()) {
		t.Fatalf("results differ:\n%+v %+v\n%+v %+v", f1.Tensors(), f1.Metadata(), f2.Tensors(), f2.Metadata())
	}
}

// checkStreamed parses b with its header read whole and in pieces of a
// few bytes, and fails if the results or errors differ in any way.
func checkStreamed(t *testing.T, b []byte) {
	t.Helper()
	f1, err1 := parsePieces(bytes.NewReader(b), int64(len(b)), "x.safetensors", nil, 1<<30)
	for _, piece := range []int{1, 2, 3, 7, 64} {
		f2, err2 := parsePieces(bytes.NewReader(b), int64(len(b)), "x.safetensors", nil, piece)
		if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
			t.Fatalf("pieces of %d: %v; whole: %v", piece, err2, err1)
		}
		if err1 != nil {
			continue
		}
		if !equalTensors(f1.Tensors(), f2.Tensors()) || !slices.Equal(f1.Metadata(), f2.Metadata()) ||
			!reflect.DeepEqual(f1.Info(), f2.Info()) {
			t.Fatalf("pieces of %d: results differ:\n%+v %+v\n%+v %+v", piece, f2.Tensors(), f2.Metadata(), f1.Tensors(), f1.Metadata())
		}
	}
}

// A streamed tokenizer gives the same tokens, errors and offsets as one
// over the whole text, whatever the pieces.
func TestStreamTokenizerMatchesWhole(t *testing.T) {
	for _, in := range tokenizerInputs {
		checkStreamTokens(t, in)
	}
}

// checkStreamTokens fails if in tokenized in pieces of a few bytes gives
// other tokens, errors or offsets than in tokenized whole.
func checkStreamTokens(t *testing.T, in string) {
	t.Helper()
	want := fullTrace(newTokenizer(in))
	for _, piece := range []int{1, 2, 3, 5} {
		rest := in
		z := newStreamTokenizer(func(tail string) (string, error) {
			if rest == "" {
				return "", io.EOF
			}
			k := min(piece, len(rest))
			p := rest[:k]
			rest = rest[k:]
			return tail + p, nil
		})
		if got := fullTrace(z); !slices.Equal(got, want) {
			t.Errorf("%q in pieces of %d:\n got %q\nwant %q", in, piece, got, want)
		}
	}
}

// fullTrace is tokenTrace with error messages and offsets.
func fullTrace(z *tokenizer) []string {
	var out []string
	for i := 0; i < 10000; i++ {
		more := z.More()
		tok, err := z.next()
		if err != nil {
			var se *jsonSyntaxError
			if errors.As(err, &se) {
				return append(out, fmt.Sprintf("error %v at %d", se, se.Offset))
			}
			return append(out, "error "+err.Error())
		}
		out = append(out, fmt.Sprintf("%v %c %q", more, tok.kind, tok.s))
	}
	return append(out, "too long")
}

// escapedNamesFile is a file of 50 tensors whose names and metadata need
// JSON escapes and non-ASCII UTF-8.
func escapedNamesFile(t *testing.T) []byte {
	var tensors []formats.Tensor
	for i := range 50 {
		tensors = append(tensors, formats.Tensor{Name: fmt.Sprintf("t.%d\n\"é", i), Type: formats.BF16, Shape: []int64{int64(i), 3}})
	}
	b, _ := writeAll(t, tensors, map[string]string{"a": "b\\c"}, nil)
	return b
}

func TestParseStreamed(t *testing.T) {
	b := escapedNamesFile(t)
	checkStreamed(t, b)
	for _, h := range []string{"", "   ", " {}", "x", "\xff{}", "{\"a\":\"\xe2\x82\"}", "{\"a\":\"\xe2\x82\xac\"}", "  [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]",
		`{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{}}`, `{"t":{"dtype":"F32","shape":[1e5],"data_offsets":[0,8]}}`, `{"t":tru`} {
		checkStreamed(t, raw(h, make([]byte, 8)))
	}
}

func TestParseMatchesDecoder(t *testing.T) {
	b := escapedNamesFile(t)
	checkSameAsDecoder(t, b)
}

// BenchmarkParseHeader compares the header parser on the fast tokenizer
// with the same parser on json.Decoder, on a 2,500-tensor header (SDXL size).
func BenchmarkParseHeader(b *testing.B) {
	var tensors []formats.Tensor
	for i := range 2500 {
		tensors = append(tensors, formats.Tensor{
			Name:  fmt.Sprintf("model.diffusion_model.output_blocks.%d.1.transformer_blocks.%d.attn1.to_k.weight", i/10, i%10),
			Type:  formats.F16,
			Shape: []int64{640, 640},
		})
	}
	w, err := NewWriter(nil, tensors, map[string]string{"format": "pt"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	hdr := w.HeaderBytes()
	size := w.Size()
	// The data section is not read: a ReaderAt over the header that claims the full size.
	r := bytes.NewReader(hdr)
	for _, c := range []struct {
		name string
		src  func(string) tokenSource
	}{{"tokenizer", nil}, {"json.Decoder", decoderTokens}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(hdr)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parse(r, size, "bench.safetensors", c.src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
