package safetensors

import (
	"encoding/json"
	"fmt"
	"io"
)

// tokenSource is json.Decoder's token API as the header parser uses it,
// with tokens as values rather than interfaces: boxing every key, dtype
// and number of a header of 500k tensors made more garbage than the
// header itself. tokenizer implements it over the header's text; tests
// adapt json.Decoder to it as an oracle.
type tokenSource interface {
	next() (token, error)
	More() bool
}

// token is one JSON token. kind is the delimiter ('{', '}', '[', ']'),
// '"' for a string, '0' for a number, or 't', 'f', 'n' for true, false and
// null; s holds a string's value or a number's text.
type token struct {
	kind byte
	s    string
}

// json returns the token as json.Decoder.Token with UseNumber gives it.
func (t token) json() json.Token {
	switch t.kind {
	case '"':
		return t.s
	case '0':
		return json.Number(t.s)
	case 't':
		return true
	case 'f':
		return false
	case 'n':
		return nil
	}
	return json.Delim(t.kind)
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
// thousands of tensors parse several times faster. Strings without
// escapes and numbers are substrings of the input, not copies. Its input
// must be valid UTF-8 (the caller checks); string escapes are decoded by
// encoding/json.
//
// Its input is a window b on the text (offset base) that src extends as
// tokens need, dropping what they no longer do: a header of 46 MB is never
// held whole. Strings already returned stay valid (they keep their own
// window alive).
type tokenizer struct {
	b     string
	base  int64  // offset of b in the input
	pos   int    // in b
	stack []byte // open containers: '{' or '['
	state int
	// src returns tail followed by the next piece of the input, in one new
	// string, or "" and io.EOF at its end (nil: b is all of it); readErr is
	// the error other than io.EOF that ended it.
	src     func(tail string) (string, error)
	readErr error
}

func newTokenizer(b string) *tokenizer { return &tokenizer{b: b} }

// newStreamTokenizer returns a tokenizer over the pieces src appends.
func newStreamTokenizer(src func(tail string) (string, error)) *tokenizer {
	return &tokenizer{src: src}
}

// more extends the window with the next piece of input, dropping the bytes
// before keep; it returns how far positions in the window moved, or -1
// when the input is exhausted.
func (z *tokenizer) more(keep int) int {
	for z.src != nil {
		b, err := z.src(z.b[keep:])
		if err != nil {
			if err != io.EOF {
				z.readErr = err
			}
			z.src = nil
			break
		}
		if len(b) == len(z.b)-keep {
			continue // an empty piece
		}
		z.b = b
		z.base += int64(keep)
		z.pos -= keep
		return keep
	}
	return -1
}

// ensure makes the window hold n bytes from pos where the input has them.
func (z *tokenizer) ensure(n int) {
	for len(z.b)-z.pos < n && z.more(z.pos) >= 0 {
	}
}

func (z *tokenizer) skipSpace() {
	for {
		for z.pos < len(z.b) {
			switch z.b[z.pos] {
			case ' ', '\t', '\r', '\n':
				z.pos++
			default:
				return
			}
		}
		if z.more(z.pos) < 0 {
			return
		}
	}
}

func (z *tokenizer) errAt(format string, args ...any) error {
	return &jsonSyntaxError{msg: fmt.Sprintf(format, args...), Offset: z.base + int64(z.pos)}
}

// More reports whether the current array or object has another element.
func (z *tokenizer) More() bool {
	z.skipSpace()
	return z.pos < len(z.b) && z.b[z.pos] != ']' && z.b[z.pos] != '}'
}

// next returns the next token, or io.EOF after the top-level value when
// only whitespace remains.
func (z *tokenizer) next() (token, error) {
	z.skipSpace()
	if z.state == stEnd {
		if z.pos == len(z.b) {
			return token{}, io.EOF
		}
		return token{}, z.errAt("invalid character %q after top-level value", z.b[z.pos])
	}
	if z.pos == len(z.b) {
		if z.state == stValue && len(z.stack) == 0 {
			return token{}, io.EOF // empty input, as json.Decoder reports it
		}
		return token{}, io.ErrUnexpectedEOF
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
			return z.next()
		case top == '{' && c == '}', top == '[' && c == ']':
			return z.close(c), nil
		}
		return token{}, z.errAt("invalid character %q after %s element", c, containerName(top))
	case stKeyOrClose:
		if c == '}' {
			return z.close(c), nil
		}
		z.state = stKey
		return z.next()
	case stValueOrClose:
		if c == ']' {
			return z.close(c), nil
		}
		z.state = stValue
		return z.next()
	case stKey:
		if c != '"' {
			return token{}, z.errAt("invalid character %q looking for an object key", c)
		}
		key, err := z.str()
		if err != nil {
			return token{}, err
		}
		z.state = stColon
		return token{'"', key}, nil
	case stColon:
		if c != ':' {
			return token{}, z.errAt("invalid character %q after object key", c)
		}
		z.pos++
		z.state = stValue
		return z.next()
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
		return token{kind: c}, nil
	case c == '"':
		s, err := z.str()
		if err != nil {
			return token{}, err
		}
		z.afterValue()
		return token{'"', s}, nil
	case c == '-' || c >= '0' && c <= '9':
		n, err := z.number()
		if err != nil {
			return token{}, err
		}
		z.afterValue()
		return token{'0', n}, nil
	}
	z.ensure(len("false"))
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(z.b)-z.pos >= len(lit) && z.b[z.pos:z.pos+len(lit)] == lit {
			z.pos += len(lit)
			z.afterValue()
			return token{kind: lit[0]}, nil
		}
	}
	return token{}, z.errAt("invalid character %q looking for a value", c)
}

func containerName(c byte) string {
	if c == '{' {
		return "object"
	}
	return "array"
}

func (z *tokenizer) close(c byte) token {
	z.pos++
	z.stack = z.stack[:len(z.stack)-1]
	z.afterValue()
	return token{kind: c}
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
	for i := start + 1; ; i++ {
		for i >= len(z.b) {
			shift := z.more(start)
			if shift < 0 {
				z.pos = len(z.b)
				return "", io.ErrUnexpectedEOF
			}
			start, i = start-shift, i-shift
		}
		switch c := z.b[i]; {
		case c == '"':
			z.pos = i + 1
			if !escaped {
				return z.b[start+1 : i], nil
			}
			// Escapes are rare in headers; encoding/json decodes them exactly.
			var s string
			if err := json.Unmarshal([]byte(z.b[start:i+1]), &s); err != nil {
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
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (z *tokenizer) number() (string, error) {
	// The run of number bytes, and the byte after it, into the window.
	for j := z.pos; ; {
		for j < len(z.b) && numberByte(z.b[j]) {
			j++
		}
		if j < len(z.b) {
			break
		}
		shift := z.more(z.pos)
		if shift < 0 {
			break
		}
		j -= shift
	}
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
	n := b[z.pos:i]
	z.pos = i
	return n, nil
}

// numberByte reports the bytes a JSON number may hold.
func numberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}
