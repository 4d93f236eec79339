package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// File is an opened safetensors file: its header is parsed and validated,
// and tensor data is read on demand with ReadAt.
type File struct {
	path    string
	r       io.ReaderAt
	closer  io.Closer
	size    int64
	info    formats.Info
	tensors []formats.Tensor
	meta    formats.Metadata
}

var _ formats.Model = (*File)(nil)

// Open opens and validates the safetensors file at path. It reads the
// 8-byte length and the header only; the file stays open for ReadTensorAt
// until Close.
func Open(path string) (*File, error) {
	sf, f, err := formats.OpenFile(path, Parse, func() error { return formatError(path, "", "is a directory") })
	if err != nil {
		return nil, err
	}
	sf.closer = f
	return sf, nil
}

// Parse validates the safetensors data of size bytes in r; name is used as
// the file's path in errors and tensor descriptors. The returned File reads
// tensor data from r, which must stay valid until the File is no longer used;
// Close does not close r.
func Parse(r io.ReaderAt, size int64, name string) (*File, error) {
	return parse(r, size, name, nil)
}

// parse is Parse with a choice of JSON tokenizer (nil: the fast one).
func parse(r io.ReaderAt, size int64, name string, newTokens func(string) tokenSource) (*File, error) {
	return parsePieces(r, size, name, newTokens, headerPiece)
}

// parsePieces is parse reading a header larger than piece bytes in pieces
// of that size (tests use tiny ones).
func parsePieces(r io.ReaderAt, size int64, name string, newTokens func(string) tokenSource, piece int) (*File, error) {
	if size < 8 {
		return nil, formatError(name, "", fmt.Sprintf("file has %d bytes, too short for the 8-byte header length", size))
	}
	var lenBuf [8]byte
	if err := readFullAt(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("%s: reading the header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, formatError(name, "", fmt.Sprintf("header length %d exceeds the limit of %d bytes", n, MaxHeaderSize))
	}
	if int64(n) > size-8 {
		return nil, formatError(name, "", fmt.Sprintf("header length %d runs past the end of the file (%d bytes)", n, size))
	}
	// A header larger than a piece is read twice in pieces, never whole:
	// once to scan it (UTF-8, what it starts with, a count that sizes the
	// tables), once to tokenize it. A smaller one is read once.
	src, off := r, int64(8)
	whole := n <= uint64(piece) || newTokens != nil
	var header string
	if whole {
		var err error
		if header, err = readString(r, 8, int64(n)); err != nil {
			return nil, fmt.Errorf("%s: reading the %d-byte header: %w", name, n, err)
		}
		src, off = strings.NewReader(header), 0
	}
	sc, err := scanHeader(src, off, int64(n), piece)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the %d-byte header: %w", name, n, err)
	}
	dataStart := 8 + int64(n)
	f := &File{
		path: name,
		r:    r,
		size: size,
		info: formats.Info{Format: "safetensors", DataOffset: dataStart, Files: []string{name}},
	}
	p := headerParser{file: name, dataStart: dataStart, dataSize: size - dataStart, newTokens: newTokens}
	var dec tokenSource
	switch {
	case newTokens != nil:
		dec = newTokens(header) // an oracle tokenizer (tests)
	case whole:
		dec = newTokenizer(header)
	default:
		z := newStreamTokenizer(pieces(r, 8, int64(n), piece))
		p.readErr = func() error {
			if z.readErr == nil {
				return nil
			}
			return fmt.Errorf("%s: reading the %d-byte header: %w", name, n, z.readErr)
		}
		dec = z
	}
	if err := p.parse(sc, int64(n), dec); err != nil {
		return nil, err
	}
	f.tensors = p.tensors
	f.meta = p.meta
	end, err := p.checkLayout()
	if err != nil {
		return nil, err
	}
	if end > p.dataSize {
		return nil, p.truncated(f, end)
	}
	if trailing := size - dataStart - end; trailing > 0 {
		f.info.Warnings = append(f.info.Warnings, fmt.Sprintf(
			"%s: %d bytes after the end of the tensor data (the Hugging Face reader rejects trailing bytes)", name, trailing))
	}
	f.info.Warnings = append(f.info.Warnings, p.warnings...)
	return f, nil
}

// readString reads n bytes of r at off as a string, read straight into
// the string's memory: the header's tokens are substrings of it, not copies.
func readString(r io.ReaderAt, off, n int64) (string, error) {
	var b strings.Builder
	b.Grow(int(n))
	got, err := io.Copy(&b, io.NewSectionReader(r, off, n))
	if got == n {
		return b.String(), nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return "", err
}

// readFullAt fills p from r at off. A ReaderAt may return io.EOF along with a
// complete read, so only a short read is an error.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Path returns the path (or name) the file was opened with.
func (f *File) Path() string { return f.path }

// Info describes the file: format "safetensors", the data offset 8+N, warnings.
func (f *File) Info() formats.Info {
	info := f.info
	info.Files = slices.Clone(info.Files)
	info.Warnings = slices.Clone(info.Warnings)
	return info
}

// Tensors lists the tensors in header (JSON) order; callers must not modify it.
func (f *File) Tensors() []formats.Tensor { return f.tensors }

// Metadata returns the __metadata__ entries in header order: strings, but
// a GGUF array that ArrayText stored as text comes back as that array.
func (f *File) Metadata() formats.Metadata { return f.meta }

// Size returns the file size in bytes.
func (f *File) Size() int64 { return f.size }

// ReadTensorAt reads len(p) bytes of t's data starting off bytes into the
// tensor; it is safe for concurrent use when the underlying ReaderAt is (an
// *os.File is).
func (f *File) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	return formats.ReadFileTensorAt(f.r, f.path, t, p, off)
}

// Close closes the underlying file when the File was made by Open.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// headerParser walks the header JSON token by token, which keeps the key
// order and lets it see duplicate keys that unmarshalling into a map hides.
// It builds the tensor descriptors directly, sized from a count of the
// header's "data_offsets" fields, with every shape in a few shared arrays:
// a header of 500k tensors then costs a small constant per tensor beyond
// its name, not several copies of each descriptor.
type headerParser struct {
	file      string
	dataStart int64 // absolute offset of the data section
	dataSize  int64 // bytes after the header
	// newTokens makes the token source for the header; nil means the fast
	// tokenizer (tests substitute json.Decoder as an oracle).
	newTokens func(string) tokenSource
	dec       tokenSource
	// readErr reports a read error that ended the header early (nil: none
	// can happen), which token returns in place of the syntax error.
	readErr  func() error
	tensors  []formats.Tensor // Offset and Size as in the file
	meta     formats.Metadata
	warnings []string
	ints     []int64 // intArray's result, reused
	dims     []int64 // unused tail of the current shape array
	// arena holds the tensor names, copied out of the header end to end
	// (a string each would cost a header and a size class's rounding);
	// arenaBlock is the size of each new block.
	arena      strings.Builder
	arenaBlock int
}

// name returns a copy of s in the name arena, so that a descriptor's name
// keeps neither the header nor a string allocation of its own alive.
func (p *headerParser) name(s string) string {
	if p.arena.Cap()-p.arena.Len() < len(s) {
		p.arena = strings.Builder{}
		p.arena.Grow(max(p.arenaBlock, len(s)))
	}
	start := p.arena.Len()
	p.arena.WriteString(s)
	return p.arena.String()[start:]
}

// shape returns a copy of dims in the shared shape arrays, capped so that
// an append by a caller copies rather than overwrites the next shape.
func (p *headerParser) shape(dims []int64) []int64 {
	if len(dims) > cap(p.dims) {
		p.dims = make([]int64, 0, max(1024, len(dims)))
	}
	s := append(p.dims, dims...)[:len(dims):len(dims)]
	p.dims = p.dims[len(dims):len(dims)]
	return s
}

func (p *headerParser) errf(tensor, format string, args ...any) error {
	return formatError(p.file, tensor, fmt.Sprintf(format, args...))
}

// token returns the next JSON token, turning decoder errors into *formats.FormatError.
func (p *headerParser) token() (token, error) {
	tok, err := p.dec.next()
	if err == nil {
		return tok, nil
	}
	if p.readErr != nil {
		if rerr := p.readErr(); rerr != nil {
			return token{}, rerr
		}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return token{}, p.errf("", "invalid JSON in header at byte %d: %v", se.Offset, se)
	}
	var ze *jsonSyntaxError
	if errors.As(err, &ze) {
		return token{}, p.errf("", "invalid JSON in header at byte %d: %v", ze.Offset, ze)
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return token{}, p.errf("", "invalid JSON in header: unexpected end of the header")
	}
	return token{}, p.errf("", "invalid JSON in header: %v", err)
}

// parse reads the header of size bytes, which sc describes, from dec.
func (p *headerParser) parse(sc headerScan, size int64, dec tokenSource) error {
	if sc.invalidAt >= 0 {
		return p.errf("", "header is not valid UTF-8 (at byte %d)", sc.invalidAt)
	}
	if sc.head == "" {
		return p.errf("", "header is empty")
	}
	if sc.head[0] != '{' {
		return p.errf("", "header is not a JSON object (it starts with %q)", clip(sc.head, 16))
	}
	if sc.lead > 0 {
		p.warnings = append(p.warnings, fmt.Sprintf("%s: header has whitespace before '{' (the Hugging Face reader rejects it)", p.file))
	}
	p.dec = dec
	if _, err := p.token(); err != nil { // the '{' checked above
		return err
	}
	// One entry per tensor, each with one data_offsets field: the count
	// sizes the table and the duplicate check (at most the header's size
	// over 14 bytes, whatever the header holds).
	n := sc.offsets
	p.arenaBlock = int(min(64<<10, size))
	p.tensors = make([]formats.Tensor, 0, n)
	// The duplicate check indexes positions in the table, not a map of
	// names (which cost as much as the descriptors themselves).
	seen := formats.NewNameIndex(n, func(i int) string { return p.tensors[i].Name })
	seenMeta := false
	for p.dec.More() {
		tok, err := p.token()
		if err != nil {
			return err
		}
		if tok.kind != '"' {
			return p.errf("", "invalid JSON in header: object key is %v", tok.json())
		}
		key := tok.s
		if key == metadataKey {
			if seenMeta {
				return p.errf("", "duplicate key %q in header", key)
			}
			seenMeta = true
			if err := p.parseMetadata(); err != nil {
				return err
			}
			continue
		}
		if seen.Lookup(key) >= 0 {
			return p.errf(key, "duplicate key in header")
		}
		t, err := p.parseEntry(key)
		if err != nil {
			return err
		}
		p.tensors = append(p.tensors, t)
		seen.Add(len(p.tensors) - 1)
	}
	if _, err := p.token(); err != nil { // '}'
		return err
	}
	// Only (padding) whitespace may follow the object.
	if tok, err := p.dec.next(); err != io.EOF {
		if err != nil {
			return p.errf("", "invalid data after the header object: %v", err)
		}
		return p.errf("", "unexpected %s after the header object", describe(tok))
	}
	return nil
}

func (p *headerParser) parseMetadata() error {
	tok, err := p.token()
	if err != nil {
		return err
	}
	if tok.kind != '{' {
		return p.errf("", "%s is %s, not an object of strings", metadataKey, describe(tok))
	}
	seen := map[string]struct{}{}
	for p.dec.More() {
		tok, err := p.token()
		if err != nil {
			return err
		}
		key := tok.s // the decoder only returns strings as object keys
		if _, dup := seen[key]; dup {
			return p.errf("", "duplicate key %q in %s", key, metadataKey)
		}
		seen[key] = struct{}{}
		tok, err = p.token()
		if err != nil {
			return err
		}
		if tok.kind != '"' {
			return p.errf("", "%s value of %q is %s, not a string", metadataKey, key, describe(tok))
		}
		if a, ok := parseArrayText(tok.s); ok {
			p.meta = append(p.meta, formats.KV{Key: strings.Clone(key), Type: formats.TypeArray, Value: a})
			continue
		}
		// Copies: substrings would keep the whole header alive.
		p.meta = append(p.meta, formats.KV{Key: strings.Clone(key), Type: formats.TypeString, Value: strings.Clone(tok.s)})
	}
	_, err = p.token() // '}'
	return err
}

// parseEntry parses one tensor's entry into a descriptor whose Offset is
// absolute and whose Size is the byte count of its data_offsets.
func (p *headerParser) parseEntry(name string) (formats.Tensor, error) {
	t := formats.Tensor{Name: name, File: p.file}
	tok, err := p.token()
	if err != nil {
		return t, err
	}
	if tok.kind != '{' {
		return t, p.errf(name, "entry is %s, not an object", describe(tok))
	}
	var haveDtype, haveShape, haveOffsets bool
	var begin, end int64
	for p.dec.More() {
		tok, err := p.token()
		if err != nil {
			return t, err
		}
		field := tok.s // the decoder only returns strings as object keys
		var dup bool
		switch field {
		case "dtype":
			dup, haveDtype = haveDtype, true
		case "shape":
			dup, haveShape = haveShape, true
		case "data_offsets":
			dup, haveOffsets = haveOffsets, true
		default:
			return t, p.errf(name, "unknown field %q", field)
		}
		if dup {
			return t, p.errf(name, "duplicate field %q", field)
		}
		switch field {
		case "dtype":
			tok, err := p.token()
			if err != nil {
				return t, err
			}
			if tok.kind != '"' {
				return t, p.errf(name, "dtype is %s, not a string", describe(tok))
			}
			s := tok.s
			dt, ok := formats.FromSafetensors(s)
			if !ok {
				return t, p.errf(name, "unknown dtype %q", s)
			}
			t.Type = dt
		case "shape":
			dims, err := p.intArray(name, field, -1)
			if err != nil {
				return t, err
			}
			t.Shape = p.shape(dims)
		case "data_offsets":
			offsets, err := p.intArray(name, field, 2)
			if err != nil {
				return t, err
			}
			begin, end = offsets[0], offsets[1]
		}
	}
	if _, err := p.token(); err != nil { // '}'
		return t, err
	}
	var missing []string
	if !haveDtype {
		missing = append(missing, "dtype")
	}
	if !haveShape {
		missing = append(missing, "shape")
	}
	if !haveOffsets {
		missing = append(missing, "data_offsets")
	}
	if len(missing) > 0 {
		return t, p.errf(name, "missing field %s", strings.Join(missing, ", "))
	}
	if end < begin {
		return t, p.errf(name, "data_offsets [%d, %d) are reversed", begin, end)
	}
	want, err := t.Type.Bytes(t.Shape)
	if err != nil {
		if n, nerr := formats.Elements(t.Shape); nerr == nil {
			if info := t.Type.Info(); info.BlockSize > 1 && n%int64(info.BlockSize) != 0 {
				return t, p.errf(name, "%s %v: %d elements are not a whole number of bytes (%s packs %d elements in %d bytes)",
					dtypeName(t.Type), t.Shape, n, dtypeName(t.Type), info.BlockSize, info.BlockBytes)
			}
		}
		return t, p.errf(name, "%s %v: %v", dtypeName(t.Type), t.Shape, err)
	}
	if got := end - begin; got != want {
		return t, p.errf(name, "data_offsets [%d, %d) hold %d bytes, but %s %v needs %d",
			begin, end, got, dtypeName(t.Type), t.Shape, want)
	}
	if end > math.MaxInt64-p.dataStart {
		return t, p.errf(name, "data_offsets [%d, %d) end past any possible file", begin, end)
	}
	t.Offset, t.Size = p.dataStart+begin, end-begin
	t.Name = p.name(name)
	return t, nil
}

// intArray reads a JSON array of non-negative integers; want is the exact
// length required, or -1 for any length.
func (p *headerParser) intArray(tensor, field string, want int) ([]int64, error) {
	bad := func(got string) error {
		if want >= 0 {
			return p.errf(tensor, "%s must be %d non-negative integers, got %s", field, want, got)
		}
		return p.errf(tensor, "%s must be an array of non-negative integers, got %s", field, got)
	}
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if tok.kind != '[' {
		return nil, bad(describe(tok))
	}
	out := p.ints[:0] // reused: the caller copies what it keeps
	for p.dec.More() {
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		if tok.kind != '0' {
			return nil, bad(describe(tok))
		}
		v, err := strconv.ParseUint(tok.s, 10, 63)
		if err != nil {
			return nil, bad(clip(tok.s, 32))
		}
		if want >= 0 && len(out) == want {
			return nil, bad("more")
		}
		out = append(out, int64(v))
	}
	if _, err := p.token(); err != nil { // ']'
		return nil, err
	}
	if want >= 0 && len(out) != want {
		return nil, bad(strconv.Itoa(len(out)))
	}
	p.ints = out
	return out, nil
}

// checkLayout checks that the tensors, in offset order, tile the data
// section from 0 with no gap or overlap; it returns the end of the last
// one. Headers written in offset order (nearly all) need no sort.
func (p *headerParser) checkLayout() (int64, error) {
	ts := p.tensors
	cmp := func(a, b int32) int {
		ta, tb := &ts[a], &ts[b]
		if ta.Offset != tb.Offset {
			return cmpInt(ta.Offset, tb.Offset)
		}
		return cmpInt(ta.Size, tb.Size) // same begin: the shorter ends first
	}
	var order []int32
	for i := 1; i < len(ts); i++ {
		if cmp(int32(i-1), int32(i)) > 0 {
			order = make([]int32, len(ts))
			for j := range order {
				order[j] = int32(j)
			}
			slices.SortStableFunc(order, cmp)
			break
		}
	}
	at := func(i int) *formats.Tensor {
		if order != nil {
			return &ts[order[i]]
		}
		return &ts[i]
	}
	var end int64
	var prev *formats.Tensor
	for i := range ts {
		t := at(i)
		begin, tEnd := t.Offset-p.dataStart, t.Offset-p.dataStart+t.Size
		switch {
		case begin > end && prev == nil:
			return 0, p.errf(t.Name, "data starts at byte %d of the data section; the first tensor must start at 0", begin)
		case begin > end:
			return 0, p.errf(t.Name, "gap of %d bytes between tensor %q [%d, %d) and this tensor [%d, %d)",
				begin-end, prev.Name, prev.Offset-p.dataStart, prev.Offset-p.dataStart+prev.Size, begin, tEnd)
		case begin < end:
			return 0, p.errf(t.Name, "data_offsets [%d, %d) overlap tensor %q [%d, %d)",
				begin, tEnd, prev.Name, prev.Offset-p.dataStart, prev.Offset-p.dataStart+prev.Size)
		}
		end = tEnd
		prev = t
	}
	return end, nil
}

// truncated returns the error for file f, whose data section ends before
// end, the end of its tensor data: the cut tensors are listed in data
// order, and its Header is f, warning first. The tiling that checkLayout
// checked makes the first cut tensor the one that holds the file's end.
func (p *headerParser) truncated(f *File, end int64) error {
	e := &formats.TruncatedError{File: f.path, Size: f.size, Want: p.dataStart + end, Tensors: len(f.tensors), Err: ErrFormat}
	cut := make([]*formats.Tensor, 0, 16)
	for i := range f.tensors {
		if t := &f.tensors[i]; t.Size > 0 && t.Offset+t.Size > f.size {
			cut = append(cut, t)
		}
	}
	slices.SortStableFunc(cut, func(a, b *formats.Tensor) int { return cmpInt(a.Offset, b.Offset) })
	for _, t := range cut {
		e.Cut = append(e.Cut, t.Name)
	}
	first := cut[0]
	e.First = fmt.Sprintf("data_offsets [%d, %d) run past the end of the file (the data section has %d bytes)",
		first.Offset-p.dataStart, first.Offset-p.dataStart+first.Size, p.dataSize)
	f.info.Warnings = append(append([]string{e.Warning()}, f.info.Warnings...), p.warnings...)
	e.Header = f
	return e
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func dtypeName(t formats.DType) string {
	if s, ok := t.SafetensorsName(); ok {
		return s
	}
	return t.String()
}

// describe names a JSON token for error messages.
func describe(t token) string {
	switch v := t.json().(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", string(v))
	case string:
		return fmt.Sprintf("the string %q", clip(v, 32))
	case json.Number:
		return "the number " + clip(string(v), 32)
	case bool:
		return fmt.Sprintf("%v", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", t.json())
}

// clip shortens b for an error message.
func clip(b string, n int) string {
	if len(b) <= n {
		return b
	}
	return b[:n] + "..."
}
