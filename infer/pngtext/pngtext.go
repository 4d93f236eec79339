package pngtext

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// ParametersKey is the keyword under which A1111, stable-diffusion.cpp and ComfyUI readers look for a
// generated image's settings.
const ParametersKey = "parameters"

// ErrFormat is returned (wrapped) for a malformed PNG stream.
var ErrFormat = errors.New("malformed PNG")

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// maxText bounds a text chunk that Read accepts (and inflates): generation settings are small.
const maxText = 16 << 20

// Write encodes img as PNG (an opaque image becomes 8-bit RGB) with one text chunk per entry of text,
// written right after the header in the order given by keys (sorted when keys is nil). A value that
// Latin-1 can represent goes into a tEXt chunk, any other into an uncompressed UTF-8 iTXt chunk, as PIL
// (and so A1111) does. Keywords must be 1 to 79 printable Latin-1 characters.
func Write(w io.Writer, img image.Image, text map[string]string, keys []string) error {
	if keys == nil {
		for k := range text {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	var chunks bytes.Buffer
	for _, k := range keys {
		v, ok := text[k]
		if !ok {
			return fmt.Errorf("png text: key %q has no value", k)
		}
		if err := appendTextChunk(&chunks, k, v); err != nil {
			return err
		}
	}
	var enc bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.DefaultCompression}).Encode(&enc, img); err != nil {
		return err
	}
	data := enc.Bytes()
	// The encoder writes the signature then IHDR (4 length + 4 type + 13 data + 4 CRC); text chunks may go
	// anywhere before IEND, and right after IHDR is where readers look first.
	const ihdrEnd = 8 + 4 + 4 + 13 + 4
	if len(data) < ihdrEnd || !bytes.Equal(data[:8], pngSignature) || string(data[12:16]) != "IHDR" {
		return fmt.Errorf("%w: unexpected encoder output", ErrFormat)
	}
	for _, part := range [][]byte{data[:ihdrEnd], chunks.Bytes(), data[ihdrEnd:]} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	return nil
}

// latin1 converts s to Latin-1 bytes when every rune fits.
func latin1(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xFF || r == utf8.RuneError {
			return nil, false
		}
		out = append(out, byte(r))
	}
	return out, true
}

func validKeyword(k string) bool {
	b, ok := latin1(k)
	if !ok || len(b) < 1 || len(b) > 79 || b[0] == ' ' || b[len(b)-1] == ' ' {
		return false
	}
	for _, c := range b {
		if c < 0x20 || (c > 0x7e && c < 0xa1) {
			return false
		}
	}
	return true
}

func appendTextChunk(buf *bytes.Buffer, key, value string) error {
	if !validKeyword(key) {
		return fmt.Errorf("png text: invalid keyword %q (1-79 printable Latin-1 characters)", key)
	}
	kb, _ := latin1(key)
	var data []byte
	typ := "tEXt"
	if vb, ok := latin1(value); ok && !strings.ContainsRune(value, 0) {
		data = append(append(append(data, kb...), 0), vb...)
	} else {
		if !utf8.ValidString(value) {
			return fmt.Errorf("png text: value of %q is not valid UTF-8", key)
		}
		typ = "iTXt"
		// keyword, NUL, compression flag 0, method 0, empty language tag, NUL, empty translated keyword, NUL.
		data = append(append(append(data, kb...), 0, 0, 0, 0, 0), value...)
	}
	writeChunk(buf, typ, data)
	return nil
}

func writeChunk(buf *bytes.Buffer, typ string, data []byte) {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	buf.Write(hdr[:])
	buf.Write(data)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:])
	crc.Write(data)
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc.Sum32())
	buf.Write(c[:])
}

// Read reads the text chunks (tEXt, zTXt and iTXt) of a PNG stream into a map (UTF-8 values; a later
// chunk with the same keyword wins). It checks the signature, chunk lengths and CRCs, and stops at IEND.
func Read(r io.Reader) (map[string]string, error) {
	var sig [8]byte
	if _, err := io.ReadFull(r, sig[:]); err != nil || !bytes.Equal(sig[:], pngSignature) {
		return nil, fmt.Errorf("%w: no PNG signature", ErrFormat)
	}
	out := map[string]string{}
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, fmt.Errorf("%w: truncated before IEND", ErrFormat)
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		typ := string(hdr[4:8])
		if n > 1<<31-1 {
			return nil, fmt.Errorf("%w: chunk %q length %d", ErrFormat, typ, n)
		}
		isText := typ == "tEXt" || typ == "zTXt" || typ == "iTXt"
		crc := crc32.NewIEEE()
		crc.Write(hdr[4:])
		var data []byte
		if isText {
			if n > maxText {
				return nil, fmt.Errorf("%w: %s chunk of %d bytes", ErrFormat, typ, n)
			}
			data = make([]byte, n)
			if _, err := io.ReadFull(r, data); err != nil {
				return nil, fmt.Errorf("%w: truncated %s chunk", ErrFormat, typ)
			}
			crc.Write(data)
		} else if _, err := io.CopyN(crc, r, int64(n)); err != nil {
			return nil, fmt.Errorf("%w: truncated %s chunk", ErrFormat, typ)
		}
		var c [4]byte
		if _, err := io.ReadFull(r, c[:]); err != nil {
			return nil, fmt.Errorf("%w: truncated %s chunk", ErrFormat, typ)
		}
		if binary.BigEndian.Uint32(c[:]) != crc.Sum32() {
			return nil, fmt.Errorf("%w: %s chunk CRC mismatch", ErrFormat, typ)
		}
		if typ == "IEND" {
			return out, nil
		}
		if !isText {
			continue
		}
		k, v, err := parseTextChunk(typ, data)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
}

func latin1ToUTF8(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		s.WriteRune(rune(c))
	}
	return s.String()
}

func inflate(typ string, b []byte) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, typ, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, maxText+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, typ, err)
	}
	if len(out) > maxText {
		return nil, fmt.Errorf("%w: %s inflates beyond %d bytes", ErrFormat, typ, maxText)
	}
	return out, nil
}

func parseTextChunk(typ string, data []byte) (string, string, error) {
	kw, rest, ok := bytes.Cut(data, []byte{0})
	if !ok || len(kw) == 0 || len(kw) > 79 {
		return "", "", fmt.Errorf("%w: %s chunk without a valid keyword", ErrFormat, typ)
	}
	key := latin1ToUTF8(kw)
	switch typ {
	case "tEXt":
		return key, latin1ToUTF8(rest), nil
	case "zTXt":
		if len(rest) < 1 || rest[0] != 0 {
			return "", "", fmt.Errorf("%w: zTXt %q: unknown compression method", ErrFormat, key)
		}
		text, err := inflate(typ, rest[1:])
		if err != nil {
			return "", "", err
		}
		return key, latin1ToUTF8(text), nil
	}
	// iTXt: compression flag, method, language tag NUL, translated keyword NUL, text.
	if len(rest) < 2 {
		return "", "", fmt.Errorf("%w: iTXt %q truncated", ErrFormat, key)
	}
	flag, method := rest[0], rest[1]
	_, rest, ok = bytes.Cut(rest[2:], []byte{0})
	if ok {
		_, rest, ok = bytes.Cut(rest, []byte{0})
	}
	if !ok {
		return "", "", fmt.Errorf("%w: iTXt %q truncated", ErrFormat, key)
	}
	text := rest
	switch {
	case flag == 1 && method == 0:
		var err error
		if text, err = inflate(typ, rest); err != nil {
			return "", "", err
		}
	case flag != 0:
		return "", "", fmt.Errorf("%w: iTXt %q: unknown compression", ErrFormat, key)
	}
	if !utf8.Valid(text) {
		return "", "", fmt.Errorf("%w: iTXt %q is not UTF-8", ErrFormat, key)
	}
	return key, string(text), nil
}
