package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// File is an opened checkpoint: its pickle has been read and every tensor
// checked against its storage; tensor data is read on demand.
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

// Open opens the checkpoint at path (zip or legacy format). The file stays
// open for ReadTensorAt until Close; it is never written.
func Open(path string) (*File, error) {
	cf, f, err := formats.OpenFile(path, Parse, func() error { return formatError(path, "", "is a directory") })
	if err != nil {
		return nil, err
	}
	cf.closer = f
	return cf, nil
}

// OpenModel is Open returning a formats.Model.
func OpenModel(path string) (formats.Model, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Parse reads the checkpoint of size bytes in r; name is used as the file's
// path in errors and tensor descriptors. A file that starts with a zip local
// header is read as a zip checkpoint, anything else as a legacy one. The
// returned File reads tensor data from r, which must stay valid while the
// File is used; Close does not close r.
func Parse(r io.ReaderAt, size int64, name string) (*File, error) {
	var head [4]byte
	n, _ := r.ReadAt(head[:], 0)
	f := &File{path: name, r: r, size: size, info: formats.Info{Format: "ckpt", Files: []string{name}}}
	var err error
	if n == 4 && IsZipHead(head[:]) {
		err = f.parseZip()
	} else {
		err = f.parseLegacy()
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// IsZipHead reports whether head starts with a zip local file header.
func IsZipHead(head []byte) bool { return bytes.HasPrefix(head, []byte("PK\x03\x04")) }

// IsLegacyHead reports whether head starts with the pickled magic number
// of a legacy (pre-1.6) torch checkpoint, in any pickle protocol. It only
// matches bytes: detection runs on every file opened, so it builds nothing.
func IsLegacyHead(head []byte) bool {
	_, ok := legacyHeadLen(head)
	return ok
}

// legacyHeadLen returns the length of the magic-number pickle at the start
// of head: an optional PROTO and FRAME, the number as LONG1, LONG4 or a
// text LONG line, then STOP.
func legacyHeadLen(head []byte) (int, bool) {
	b := head
	if len(b) >= 2 && b[0] == opProto && b[1] <= 5 {
		b = b[2:]
	}
	if len(b) >= 9 && b[0] == opFrame {
		b = b[9:]
	}
	var num []byte // little-endian two's complement
	switch {
	case len(b) >= 2 && b[0] == opLong1:
		n := int(b[1])
		if len(b) < 2+n {
			return 0, false
		}
		num, b = b[2:2+n], b[2+n:]
	case len(b) >= 5 && b[0] == opLong4:
		n := binary.LittleEndian.Uint32(b[1:])
		if n > 16 || len(b) < 5+int(n) {
			return 0, false
		}
		num, b = b[5:5+n], b[5+n:]
	case len(b) >= 1 && b[0] == opLong:
		i := bytes.IndexByte(b[:min(len(b), 40)], '\n')
		if i < 0 {
			return 0, false
		}
		if strings.TrimSuffix(string(b[1:i]), "L") != legacyMagic.String() {
			return 0, false
		}
		b = b[i+1:]
	default:
		return 0, false
	}
	if num != nil {
		v, ok := decodeLong(num).(pyBigInt)
		if !ok || v.v.Cmp(legacyMagic) != 0 {
			return 0, false
		}
	}
	if len(b) == 0 || b[0] != opStop {
		return 0, false
	}
	return len(head) - len(b) + 1, true
}

func (f *File) errf(tensor, format string, args ...any) error {
	return formatError(f.path, tensor, fmt.Sprintf(format, args...))
}

// storageSpan is where a storage record's bytes are in the file.
type storageSpan struct {
	off, size int64
	err       string // why the record cannot be used
}

// parseZip reads a zip checkpoint: ROOT/data.pkl, ROOT/byteorder,
// ROOT/version and one ROOT/data/KEY entry per storage.
func (f *File) parseZip() error {
	zr, err := zip.NewReader(f.r, f.size)
	// Entry names are only looked up, never used as paths, so an "insecure"
	// name is harmless here.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return f.errf("", "reading the zip directory: %v", err)
	}
	entries := make(map[string]*zip.File, len(zr.File))
	var pkl *zip.File
	for _, e := range zr.File {
		if _, dup := entries[e.Name]; !dup {
			entries[e.Name] = e
		}
		if pkl == nil && isDataPkl(e.Name) {
			pkl = e
		}
	}
	if pkl == nil {
		return f.errf("", "zip archive has no data.pkl record (not a torch.save checkpoint)")
	}
	root := strings.TrimSuffix(pkl.Name, "data.pkl")
	if e := entries[root+"byteorder"]; e != nil {
		b, err := readEntry(e, 16)
		if err != nil {
			return f.errf("", "reading %s: %v", printable(e.Name), err)
		}
		if bo := strings.TrimSpace(string(b)); bo != "little" {
			return f.errf("", "byte order %q is not supported (only little-endian checkpoints)", bo)
		}
	}
	if e := entries[root+"version"]; e != nil {
		if b, err := readEntry(e, 16); err == nil {
			f.info.Version, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	data, err := readEntry(pkl, MaxPickleSize)
	if err != nil {
		return f.errf("", "reading %s: %v", printable(pkl.Name), err)
	}
	v, _, err := unpickle(newSource(bytes.NewReader(data), 0, int64(len(data))))
	if err != nil {
		return f.errf("", "%s: %v", printable(pkl.Name), err)
	}
	spans := map[string]storageSpan{}
	resolve := func(key string) storageSpan {
		if s, ok := spans[key]; ok {
			return s
		}
		s := f.zipSpan(entries, root+"data/"+key)
		spans[key] = s
		return s
	}
	if err := f.build(v, resolve); err != nil {
		return err
	}
	f.info.DataOffset = 0
	for i, t := range f.tensors {
		if i == 0 || t.Offset < f.info.DataOffset {
			f.info.DataOffset = t.Offset
		}
	}
	return nil
}

// zipSpan locates the bytes of one stored (uncompressed) zip entry.
func (f *File) zipSpan(entries map[string]*zip.File, entry string) storageSpan {
	e := entries[entry]
	name := printable(entry)
	if e == nil {
		return storageSpan{err: fmt.Sprintf("storage record %s is missing from the archive", name)}
	}
	if e.Method != zip.Store {
		return storageSpan{err: fmt.Sprintf("storage record %s is compressed (zip method %d); torch.save stores storages uncompressed, so re-save the checkpoint without compression", name, e.Method)}
	}
	off, err := e.DataOffset()
	if err != nil {
		return storageSpan{err: fmt.Sprintf("storage record %s: %v", name, err)}
	}
	if e.UncompressedSize64 != e.CompressedSize64 || e.UncompressedSize64 > uint64(f.size) || off < 0 || off > f.size-int64(e.UncompressedSize64) {
		return storageSpan{err: fmt.Sprintf("storage record %s (%d bytes at offset %d) runs past the end of the file (%d bytes)", name, e.UncompressedSize64, off, f.size)}
	}
	return storageSpan{off: off, size: int64(e.UncompressedSize64)}
}

// readEntry reads a whole zip entry of at most limit bytes (allocating only
// as the data arrives, whatever size the directory claims).
func readEntry(e *zip.File, limit int64) ([]byte, error) {
	rc, err := e.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("record is larger than %d bytes", limit)
	}
	return b, nil
}

// parseLegacy reads a legacy checkpoint: five pickles, then for every key
// of the fifth (in its order) an 8-byte little-endian element count and the
// storage's raw bytes.
func (f *File) parseLegacy() error {
	// The magic number is matched as bytes before anything is unpickled,
	// so that a file that is no checkpoint builds nothing.
	head := make([]byte, min(f.size, 64))
	n, _ := f.r.ReadAt(head, 0)
	hn, ok := legacyHeadLen(head[:n])
	if !ok {
		return f.errf("", "not a zip or legacy PyTorch checkpoint: the file does not start with torch's pickled magic number")
	}
	src := newSource(io.NewSectionReader(f.r, int64(hn), f.size-int64(hn)), int64(hn), f.size)
	proto, _, err := unpickle(src)
	if err != nil {
		return f.errf("", "reading the protocol version: %v", err)
	}
	if p, ok := proto.(int64); !ok || p != LegacyProtocolVersion {
		return f.errf("", "legacy protocol version %s is not supported (want %d)", describe(proto), LegacyProtocolVersion)
	}
	f.info.Version = LegacyProtocolVersion
	sys, _, err := unpickle(src)
	if err != nil {
		return f.errf("", "reading the system information: %v", err)
	}
	if d, ok := sys.(*pyDict); ok {
		if le, ok := d.lookup("little_endian"); ok && le != true {
			return f.errf("", "the checkpoint was written on a big-endian machine, which is not supported")
		}
	}
	root, storages, err := unpickle(src)
	if err != nil {
		return f.errf("", "reading the pickle: %v", err)
	}
	keysVal, _, err := unpickle(src)
	if err != nil {
		return f.errf("", "reading the storage keys: %v", err)
	}
	kl, ok := keysVal.(*pyList)
	if !ok {
		return f.errf("", "storage key list is a %s, want a list", typeName(keysVal))
	}
	f.info.DataOffset = src.pos
	spans := make(map[string]storageSpan, len(kl.items))
	off := src.pos
	var hdr [8]byte
	for _, k := range kl.items {
		key, err := keyString(k)
		if err != nil {
			return f.errf("", "storage key list: %v", err)
		}
		ref := storages[key]
		if ref == nil {
			return f.errf("", "storage %q is listed but no tensor refers to it, so its element size is unknown", key)
		}
		if _, dup := spans[key]; dup {
			return f.errf("", "storage %q is listed twice", key)
		}
		if off > f.size-8 {
			return f.errf("", "storage %q at offset %d runs past the end of the file (%d bytes)", key, off, f.size)
		}
		if n, err := f.r.ReadAt(hdr[:], off); n < len(hdr) {
			return fmt.Errorf("%s: reading storage %q: %w", f.path, key, err)
		}
		n := int64(leUint64(hdr[:]))
		es := ref.elemSize()
		if n < 0 || n > (f.size-off-8)/es {
			return f.errf("", "storage %q of %d elements at offset %d runs past the end of the file (%d bytes)", key, uint64(n), off, f.size)
		}
		if n != ref.numel {
			return f.errf("", "storage %q has %d elements in the file but %d in the pickle", key, n, ref.numel)
		}
		spans[key] = storageSpan{off: off + 8, size: n * es}
		off += 8 + n*es
	}
	if off < f.size {
		f.info.Warnings = append(f.info.Warnings, fmt.Sprintf("%s: %d bytes after the last storage", f.path, f.size-off))
	}
	resolve := func(key string) storageSpan {
		if s, ok := spans[key]; ok {
			return s
		}
		return storageSpan{err: fmt.Sprintf("storage %q is not in the storage key list", key)}
	}
	return f.build(root, resolve)
}

func leUint64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// elemSize is the size of one storage element (a byte for untyped storages).
func (s *storageRef) elemSize() int64 {
	if s.untyped {
		return 1
	}
	return int64(s.dtype.Info().BlockBytes)
}

// lookup returns the value of a string key.
func (d *pyDict) lookup(key string) (any, bool) {
	i, ok := d.index[key]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// collector walks the unpickled value to find tensors and scalar metadata.
type collector struct {
	f       *File
	names   []string
	vals    []*tensorVal
	byName  map[string]int
	visited map[any]bool
	skipped int
	dups    []string
	// steps counts containers and items walked, against maxObjects: the
	// unpickler's budget bounds what exists, this bounds the work of
	// walking it.
	steps int
}

// build collects the tensors of root and checks each against its storage.
func (f *File) build(root any, resolve func(key string) storageSpan) error {
	c := &collector{f: f, byName: map[string]int{}, visited: map[any]bool{}}
	if t, ok := root.(*tensorVal); ok {
		c.add(RootTensorName, t)
		f.info.Warnings = append(f.info.Warnings, fmt.Sprintf("%s: the checkpoint is a single tensor, named %q", f.path, RootTensorName))
	} else if err := c.walk(root, "", 0); err != nil {
		return err
	}
	if _, ok := root.(*pyDict); !ok && len(c.names) == 0 {
		f.info.Warnings = append(f.info.Warnings, fmt.Sprintf("%s: the checkpoint holds a %s, not a dict of tensors", f.path, typeName(root)))
	}
	if c.skipped > 0 {
		f.info.Warnings = append(f.info.Warnings, fmt.Sprintf("%s: %d tensors not stored under a string dict key were skipped", f.path, c.skipped))
	}
	for _, d := range c.dups {
		f.info.Warnings = append(f.info.Warnings, fmt.Sprintf("%s: tensor %q appears more than once; the last one is used", f.path, d))
	}
	f.tensors = make([]formats.Tensor, 0, len(c.names))
	var logical int64
	for i, name := range c.names {
		t, err := f.tensor(name, c.vals[i], resolve)
		if err != nil {
			return err
		}
		f.tensors = append(f.tensors, t)
		// Tensors may share a storage (tied weights, views), but every
		// consumer copies each tensor out, so aliases multiply the work and
		// the output: beyond twice the file's bytes they are refused, as
		// the GGUF and safetensors readers refuse overlapping tensors.
		if logical += t.Size; logical > maxAliasFactor*f.size {
			return f.errf(name, "tensors share storages so much that they hold more than %d times the file's %d bytes (%d bytes up to this one); such aliasing is refused", maxAliasFactor, f.size, logical)
		}
	}
	return nil
}

// add records a tensor; a repeated name keeps its first position and takes
// the later tensor, as stable-diffusion.cpp's tensor map does.
func (c *collector) add(name string, t *tensorVal) {
	if i, ok := c.byName[name]; ok {
		c.vals[i] = t
		c.dups = append(c.dups, name)
		return
	}
	c.byName[name] = len(c.names)
	c.names = append(c.names, name)
	c.vals = append(c.vals, t)
}

// identity returns a comparable key for a container, so that each is walked
// once however often the memo shares it (and cycles end).
func identity(v any) any {
	switch x := v.(type) {
	case *pyDict, *pyList:
		return x
	case pyTuple:
		if len(x) > 0 {
			return &x[0]
		}
	}
	return nil
}

func (c *collector) walk(v any, prefix string, depth int) error {
	if c.steps++; c.steps > maxObjects {
		return c.f.errf("", "walking the pickle takes more than %d steps, more than any checkpoint needs", maxObjects)
	}
	if len(prefix) > maxKeyPath {
		return c.f.errf("", "key path %s... is longer than %d bytes", printable(prefix[:64]), maxKeyPath)
	}
	if id := identity(v); id != nil {
		if c.visited[id] {
			return nil
		}
		c.visited[id] = true
	}
	if depth > maxDepth {
		return c.f.errf("", "containers nested more than %d deep at %q", maxDepth, prefix)
	}
	var items []any
	switch x := v.(type) {
	case *pyDict:
		if c.steps += len(x.keys); c.steps > maxObjects {
			return c.f.errf("", "walking the pickle takes more than %d steps, more than any checkpoint needs", maxObjects)
		}
		for i, k := range x.keys {
			key, isStr := k.(string)
			switch val := x.vals[i].(type) {
			case *tensorVal:
				if isStr {
					c.add(key, val)
				} else {
					c.skipped++
				}
			case *pyDict, *pyList, pyTuple:
				sub := key
				if !isStr {
					sub = describe(k)
				}
				if prefix != "" {
					sub = prefix + "." + sub
				}
				if err := c.walk(val, sub, depth+1); err != nil {
					return err
				}
			default:
				if isStr {
					c.metadata(prefix, key, val)
				}
			}
		}
		return nil
	case *pyList:
		items = x.items
	case pyTuple:
		items = x
	default:
		return nil
	}
	if c.steps += len(items); c.steps > maxObjects {
		return c.f.errf("", "walking the pickle takes more than %d steps, more than any checkpoint needs", maxObjects)
	}
	for _, it := range items {
		switch it.(type) {
		case *tensorVal:
			c.skipped++
		case *pyDict, *pyList, pyTuple:
			if err := c.walk(it, prefix, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// metadata records scalar entries such as global_step or epoch.
func (c *collector) metadata(prefix, key string, v any) {
	if len(c.f.meta) >= maxMetadata {
		return
	}
	if prefix != "" {
		key = prefix + "." + key
	}
	var kv formats.KV
	switch x := v.(type) {
	case int64:
		kv = formats.KV{Key: key, Type: formats.TypeInt64, Value: x}
	case float64:
		kv = formats.KV{Key: key, Type: formats.TypeFloat64, Value: x}
	case bool:
		kv = formats.KV{Key: key, Type: formats.TypeBool, Value: x}
	case string:
		kv = formats.KV{Key: key, Type: formats.TypeString, Value: x}
	default:
		return
	}
	c.f.meta = append(c.f.meta, kv)
}

// tensor checks a rebuilt tensor (arguments, contiguity, bounds within its
// storage and the storage within the file) and returns its descriptor.
func (f *File) tensor(name string, t *tensorVal, resolve func(string) storageSpan) (formats.Tensor, error) {
	if t.badValue != "" {
		return formats.Tensor{}, f.errf(name, "%s", t.badValue)
	}
	ref := t.storage
	elem := int64(t.dtype.Info().BlockBytes)
	if elem <= 0 || t.dtype.Info().BlockSize != 1 {
		return formats.Tensor{}, f.errf(name, "element type %s has no fixed element size", t.dtype)
	}
	n, err := formats.Elements(t.size)
	if err != nil || n > math.MaxInt64/elem {
		return formats.Tensor{}, f.errf(name, "size %v overflows", t.size)
	}
	if n > 0 {
		want := int64(1)
		for i := len(t.size) - 1; i >= 0; i-- {
			// A dim of size 1 may have any stride; torch leaves such strides unnormalised.
			if t.size[i] != 1 && t.stride[i] != want {
				return formats.Tensor{}, f.errf(name, "is not contiguous (size %v, stride %v); only contiguous tensors are supported", t.size, t.stride)
			}
			want *= t.size[i]
		}
	}
	span := resolve(ref.key)
	if span.err != "" {
		return formats.Tensor{}, f.errf(name, "%s", span.err)
	}
	es := ref.elemSize()
	if ref.numel > math.MaxInt64/es {
		return formats.Tensor{}, f.errf(name, "storage %q of %d elements of %d bytes is larger than any file (its record has %d bytes)", ref.key, ref.numel, es, span.size)
	}
	if ref.numel*es > span.size {
		return formats.Tensor{}, f.errf(name, "storage %q of %d elements needs %d bytes, but its record has %d", ref.key, ref.numel, ref.numel*es, span.size)
	}
	base, avail := span.off, ref.numel*es
	if ref.hasView {
		if ref.viewOffset > ref.numel || ref.viewNumel > ref.numel-ref.viewOffset {
			return formats.Tensor{}, f.errf(name, "storage view %q [%d, +%d) runs past its root storage %q of %d elements", ref.viewKey, ref.viewOffset, ref.viewNumel, ref.key, ref.numel)
		}
		base += ref.viewOffset * es
		avail = ref.viewNumel * es
	}
	if n > 0 && (t.offset > avail/elem || n > avail/elem-t.offset) {
		return formats.Tensor{}, f.errf(name, "elements [%d, %d) run past its storage %q of %d bytes (%d elements of %s)", t.offset, t.offset+n, ref.key, avail, avail/elem, t.dtype)
	}
	start := base
	if n > 0 {
		start += t.offset * elem
	}
	return formats.Tensor{
		Name:   name,
		Type:   t.dtype,
		Shape:  slices.Clone(t.size),
		File:   f.path,
		Offset: start,
		Size:   n * elem,
	}, nil
}

// Path returns the path (or name) the file was opened with.
func (f *File) Path() string { return f.path }

// Info describes the file: format "ckpt", the zip version record (or 1001
// for the legacy format), the offset of the first storage and warnings.
func (f *File) Info() formats.Info {
	info := f.info
	info.Files = slices.Clone(info.Files)
	info.Warnings = slices.Clone(info.Warnings)
	return info
}

// Tensors lists the tensors in pickle order; callers must not modify it.
func (f *File) Tensors() []formats.Tensor { return f.tensors }

// Metadata returns the scalar entries of the pickle's dicts (global_step,
// epoch, ...) under their dotted key paths, at most 256 of them.
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
