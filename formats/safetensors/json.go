package safetensors

import (
	"encoding/json"
	"fmt"
	"io"
)

// tokenSource is the part of json.Decoder's token API the header parser
// uses; tokenizer implements it over a byte slice.
type tokenSource interface {
	Token() (json.Token, error)
	More() bool
}

// jsonSyntaxError is a JSON grammar violation at byte Offset of the header.
type jsonSyntaxError struct {
	msg    string
	Offset int64
}

func (e *jsonSyntaxError) Error() string { return e.msg }

// Tokenizer states: what the next token may be.
const (
	stValue        = iota // any value
	stKey                 // an object key
	stColon               // the ':' after an object key
	stKeyOrClose          // a key or '}' (just after '{')
	stValueOrClose        // a value or ']' (just after '[')
	stAfter               // ',' or the closing delimiter of the container
	stEnd                 // nothing but whitespace (the top-level value is complete)
)

// tokenizer splits JSON into the same tokens as json.Decoder.Token with
// UseNumber (Delim, string, json.Number, bool, nil), consuming commas and
// colons, but without the decoder's buffering and reflection: headers of
// thousands of tensors parse several times faster. Its input must be valid
// UTF-8 (the caller checks); string escapes are decoded by encoding/json.
type tokenizer struct {
	b     []byte
	pos   int
	stack []byte // open containers: '{' or '['
	state int
}

func newTokenizer(b []byte) *tokenizer { return &tokenizer{b: b} }

func (z *tokenizer) skipSpace() {
	for z.pos < len(z.b) {
		switch z.b[z.pos] {
		case ' ', '\t', '\r', '\n':
			z.pos++
		default:
			return
		}
	}
}

func (z *tokenizer) errAt(format string, args ...any) error {
	return &jsonSyntaxError{msg: fmt.Sprintf(format, args...), Offset: int64(z.pos)}
}

// More reports whether the current array or object has another element.
func (z *tokenizer) More() bool {
	z.skipSpace()
	return z.pos < len(z.b) && z.b[z.pos] != ']' && z.b[z.pos] != '}'
}

// Token returns the next token, or io.EOF after the top-level value when
// only whitespace remains.
func (z *tokenizer) Token() (json.Token, error) {
	z.skipSpace()
	if z.state == stEnd {
		if z.pos == len(z.b) {
			return nil, io.EOF
		}
		return nil, z.errAt("invalid character %q after top-level value", z.b[z.pos])
	}
	if z.pos == len(z.b) {
		if z.state == stValue && len(z.stack) == 0 {
			return nil, io.EOF // empty input, as json.Decoder reports it
		}
		return nil, io.ErrUnexpectedEOF
	}
	c := z.b[z.pos]
	switch z.state {
	case stAfter:
		top := z.stack[len(z.stack)-1]
		switch {
		case c == ',':
			z.pos++
			if top == '{' {
				z.state = stKey
			} else {
				z.state = stValue
			}
			return z.Token()
		case top == '{' && c == '}', top == '[' && c == ']':
			return z.close(c), nil
		}
		return nil, z.errAt("invalid character %q after %s element", c, containerName(top))
	case stKeyOrClose:
		if c == '}' {
			return z.close(c), nil
		}
		z.state = stKey
		return z.Token()
	case stValueOrClose:
		if c == ']' {
			return z.close(c), nil
		}
		z.state = stValue
		return z.Token()
	case stKey:
		if c != '"' {
			return nil, z.errAt("invalid character %q looking for an object key", c)
		}
		key, err := z.str()
		if err != nil {
			return nil, err
		}
		z.state = stColon
		return key, nil
	case stColon:
		if c != ':' {
			return nil, z.errAt("invalid character %q after object key", c)
		}
		z.pos++
		z.state = stValue
		return z.Token()
	}
	// stValue
	switch {
	case c == '{' || c == '[':
		z.pos++
		z.stack = append(z.stack, c)
		if c == '{' {
			z.state = stKeyOrClose
		} else {
			z.state = stValueOrClose
		}
		return json.Delim(c), nil
	case c == '"':
		s, err := z.str()
		if err != nil {
			return nil, err
		}
		z.afterValue()
		return s, nil
	case c == '-' || c >= '0' && c <= '9':
		n, err := z.number()
		if err != nil {
			return nil, err
		}
		z.afterValue()
		return n, nil
	}
	for _, lit := range [...]struct {
		text string
		val  json.Token
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if len(z.b)-z.pos >= len(lit.text) && string(z.b[z.pos:z.pos+len(lit.text)]) == lit.text {
			z.pos += len(lit.text)
			z.afterValue()
			return lit.val, nil
		}
	}
	return nil, z.errAt("invalid character %q looking for a value", c)
}

func containerName(c byte) string {
	if c == '{' {
		return "object"
	}
	return "array"
}

func (z *tokenizer) close(c byte) json.Token {
	z.pos++
	z.stack = z.stack[:len(z.stack)-1]
	z.afterValue()
	return json.Delim(c)
}

func (z *tokenizer) afterValue() {
	if len(z.stack) == 0 {
		z.state = stEnd
	} else {
		z.state = stAfter
	}
}

// str reads the string starting at the opening quote at z.pos.
func (z *tokenizer) str() (string, error) {
	start := z.pos
	escaped := false
	for i := start + 1; i < len(z.b); i++ {
		switch c := z.b[i]; {
		case c == '"':
			z.pos = i + 1
			if !escaped {
				return string(z.b[start+1 : i]), nil
			}
			// Escapes are rare in headers; encoding/json decodes them exactly.
			var s string
			if err := json.Unmarshal(z.b[start:i+1], &s); err != nil {
				z.pos = start
				return "", z.errAt("invalid string escape: %v", err)
			}
			return s, nil
		case c == '\\':
			escaped = true
			i++ // the escaped byte cannot end the string
		case c < 0x20:
			z.pos = i
			return "", z.errAt("invalid control character %q in string", c)
		}
	}
	z.pos = len(z.b)
	return "", io.ErrUnexpectedEOF
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (z *tokenizer) number() (json.Number, error) {
	b, i := z.b, z.pos
	digits := func() int {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - j
	}
	bad := func() error {
		z.pos = i
		if i == len(b) {
			return io.ErrUnexpectedEOF
		}
		return z.errAt("invalid character %q in number", b[i])
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return "", bad()
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return "", bad()
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return "", bad()
		}
	}
	n := json.Number(b[z.pos:i])
	z.pos = i
	return n, nil
}
