package infer

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
	"strconv"
	"strings"
	"unicode/utf8"
)

// PNGParametersKey is the text-chunk keyword A1111, sd.cpp and ComfyUI readers use for generation settings.
const PNGParametersKey = "parameters"

// ErrPNG is returned (wrapped) for a malformed PNG stream.
var ErrPNG = errors.New("malformed PNG")

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// maxPNGText bounds a text chunk that PNGText accepts (and inflates): generation settings are small.
const maxPNGText = 16 << 20

// GenerationParams are the settings of one generated image, written to a PNG's parameters chunk.
type GenerationParams struct {
	// Prompt and NegativePrompt are the texts as the user gave them (weights syntax included).
	Prompt, NegativePrompt string
	// Steps is the number of sampling steps.
	Steps int
	// Sampler and Scheduler name the sampling method and the sigma schedule.
	Sampler   Method
	Scheduler Scheduler
	// CFGScale is the classifier-free guidance scale.
	CFGScale float32
	// Seed is the noise seed.
	Seed int64
	// Width and Height are the image size in pixels.
	Width, Height int
	// Model names the model (usually its file name without the folder).
	Model string
	// RNG is the noise generator ("cuda" or "cpu"); empty is omitted.
	RNG string
	// Strength is img2img's denoising strength; 0 (txt2img) is omitted.
	Strength float32
	// Version names the program ("sdtool v0.1.0"); empty is omitted.
	Version string
}

// a1111Quote quotes a value the way A1111 does when it contains a separator (JSON string syntax).
func a1111Quote(s string) string {
	if !strings.ContainsAny(s, ",\n:") {
		return s
	}
	return strconv.Quote(s)
}

func formatFloat(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }

// String formats the settings as A1111's "parameters" text: the prompt, a "Negative prompt:" line when
// there is one, then one line of "Key: value" pairs separated by ", ".
func (p GenerationParams) String() string {
	var b strings.Builder
	b.WriteString(p.Prompt)
	if p.NegativePrompt != "" {
		b.WriteString("\nNegative prompt: ")
		b.WriteString(p.NegativePrompt)
	}
	b.WriteString("\n")
	fields := []string{"Steps: " + strconv.Itoa(p.Steps)}
	if p.Sampler != "" {
		fields = append(fields, "Sampler: "+p.Sampler.A1111Name())
	}
	switch p.Scheduler {
	case SchedulerKarras:
		fields = append(fields, "Schedule type: Karras")
	case SchedulerDiscrete:
		fields = append(fields, "Schedule type: Discrete")
	case "":
	default:
		fields = append(fields, "Schedule type: "+a1111Quote(string(p.Scheduler)))
	}
	fields = append(fields,
		"CFG scale: "+formatFloat(p.CFGScale),
		"Seed: "+strconv.FormatInt(p.Seed, 10),
		"Size: "+strconv.Itoa(p.Width)+"x"+strconv.Itoa(p.Height))
	if p.Model != "" {
		fields = append(fields, "Model: "+a1111Quote(p.Model))
	}
	if p.Strength != 0 {
		fields = append(fields, "Denoising strength: "+formatFloat(p.Strength))
	}
	if p.RNG != "" {
		fields = append(fields, "RNG: "+a1111Quote(p.RNG))
	}
	if p.Version != "" {
		fields = append(fields, "Version: "+a1111Quote(p.Version))
	}
	b.WriteString(strings.Join(fields, ", "))
	return b.String()
}

// WritePNG encodes img as PNG (an opaque image becomes 8-bit RGB) with one text chunk per entry of text,
// written right after the header in the order given by keys (sorted when keys is nil). A value that
// Latin-1 can represent goes into a tEXt chunk, any other into an uncompressed UTF-8 iTXt chunk, as PIL
// (and so A1111) does. Keywords must be 1 to 79 printable Latin-1 characters.
func WritePNG(w io.Writer, img image.Image, text map[string]string, keys []string) error {
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
		return fmt.Errorf("%w: unexpected encoder output", ErrPNG)
	}
	for _, part := range [][]byte{data[:ihdrEnd], chunks.Bytes(), data[ihdrEnd:]} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	return nil
}

// WritePNGWithParams encodes img with the parameters chunk holding p's A1111 text.
func WritePNGWithParams(w io.Writer, img image.Image, p GenerationParams) error {
	return WritePNG(w, img, map[string]string{PNGParametersKey: p.String()}, nil)
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

// PNGText reads the text chunks (tEXt, zTXt and iTXt) of a PNG stream into a map (UTF-8 values; a later
// chunk with the same keyword wins). It checks the signature, chunk lengths and CRCs, and stops at IEND.
func PNGText(r io.Reader) (map[string]string, error) {
	var sig [8]byte
	if _, err := io.ReadFull(r, sig[:]); err != nil || !bytes.Equal(sig[:], pngSignature) {
		return nil, fmt.Errorf("%w: no PNG signature", ErrPNG)
	}
	out := map[string]string{}
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, fmt.Errorf("%w: truncated before IEND", ErrPNG)
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		typ := string(hdr[4:8])
		if n > 1<<31-1 {
			return nil, fmt.Errorf("%w: chunk %q length %d", ErrPNG, typ, n)
		}
		isText := typ == "tEXt" || typ == "zTXt" || typ == "iTXt"
		crc := crc32.NewIEEE()
		crc.Write(hdr[4:])
		var data []byte
		if isText {
			if n > maxPNGText {
				return nil, fmt.Errorf("%w: %s chunk of %d bytes", ErrPNG, typ, n)
			}
			data = make([]byte, n)
			if _, err := io.ReadFull(r, data); err != nil {
				return nil, fmt.Errorf("%w: truncated %s chunk", ErrPNG, typ)
			}
			crc.Write(data)
		} else if _, err := io.CopyN(crc, r, int64(n)); err != nil {
			return nil, fmt.Errorf("%w: truncated %s chunk", ErrPNG, typ)
		}
		var c [4]byte
		if _, err := io.ReadFull(r, c[:]); err != nil {
			return nil, fmt.Errorf("%w: truncated %s chunk", ErrPNG, typ)
		}
		if binary.BigEndian.Uint32(c[:]) != crc.Sum32() {
			return nil, fmt.Errorf("%w: %s chunk CRC mismatch", ErrPNG, typ)
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
		return nil, fmt.Errorf("%w: %s: %v", ErrPNG, typ, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, maxPNGText+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrPNG, typ, err)
	}
	if len(out) > maxPNGText {
		return nil, fmt.Errorf("%w: %s inflates beyond %d bytes", ErrPNG, typ, maxPNGText)
	}
	return out, nil
}

func parseTextChunk(typ string, data []byte) (string, string, error) {
	kw, rest, ok := bytes.Cut(data, []byte{0})
	if !ok || len(kw) == 0 || len(kw) > 79 {
		return "", "", fmt.Errorf("%w: %s chunk without a valid keyword", ErrPNG, typ)
	}
	key := latin1ToUTF8(kw)
	switch typ {
	case "tEXt":
		return key, latin1ToUTF8(rest), nil
	case "zTXt":
		if len(rest) < 1 || rest[0] != 0 {
			return "", "", fmt.Errorf("%w: zTXt %q: unknown compression method", ErrPNG, key)
		}
		text, err := inflate(typ, rest[1:])
		if err != nil {
			return "", "", err
		}
		return key, latin1ToUTF8(text), nil
	}
	// iTXt: compression flag, method, language tag NUL, translated keyword NUL, text.
	if len(rest) < 2 {
		return "", "", fmt.Errorf("%w: iTXt %q truncated", ErrPNG, key)
	}
	flag, method := rest[0], rest[1]
	_, rest, ok = bytes.Cut(rest[2:], []byte{0})
	if ok {
		_, rest, ok = bytes.Cut(rest, []byte{0})
	}
	if !ok {
		return "", "", fmt.Errorf("%w: iTXt %q truncated", ErrPNG, key)
	}
	text := rest
	switch {
	case flag == 1 && method == 0:
		var err error
		if text, err = inflate(typ, rest); err != nil {
			return "", "", err
		}
	case flag != 0:
		return "", "", fmt.Errorf("%w: iTXt %q: unknown compression", ErrPNG, key)
	}
	if !utf8.Valid(text) {
		return "", "", fmt.Errorf("%w: iTXt %q is not UTF-8", ErrPNG, key)
	}
	return key, string(text), nil
}

// ImageFromCHW converts a decoded image tensor (3 planes of h x w values in [-1, 1], planar R, G, B, as
// the VAE decoder outputs it) to an opaque RGBA image the way sd.cpp does: (x+1)/2 clamped to [0, 1],
// times 255, truncated.
func ImageFromCHW(data []float32, w, h int) (*image.RGBA, error) {
	if w <= 0 || h <= 0 || len(data) != 3*w*h {
		return nil, fmt.Errorf("%w: %d values for a 3x%dx%d image", ErrSize, len(data), h, w)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	plane := w * h
	for i := 0; i < plane; i++ {
		for c := 0; c < 3; c++ {
			v := (data[c*plane+i] + 1) * 0.5
			v = max(0, min(1, v))
			img.Pix[4*i+c] = uint8(v * 255)
		}
		img.Pix[4*i+3] = 255
	}
	return img, nil
}

// CHWFromImage converts an image to the VAE encoder's input: planar R, G, B in [-1, 1] (value/255*2-1),
// alpha ignored, and returns the width and height.
func CHWFromImage(img image.Image) (data []float32, w, h int) {
	w, h, planes := rgbPlanes(img)
	data = make([]float32, 3*w*h)
	for c := 0; c < 3; c++ {
		for i, v := range planes[c] {
			data[c*w*h+i] = float32(v)/255*2 - 1
		}
	}
	return data, w, h
}
