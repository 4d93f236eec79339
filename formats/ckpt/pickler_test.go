package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"math"
	"sort"
	"testing"
)

// pk is a minimal pickle encoder for test fixtures, written from the
// protocol-2 opcode definitions (pickletools): it emits what torch.save's
// pickler emits for a state dict, so the reader is tested against byte
// streams built independently of it.
type pk struct {
	b    []byte
	memo int
}

func newPickle(proto byte) *pk {
	p := &pk{}
	if proto >= 2 {
		p.b = append(p.b, 0x80, proto)
	}
	return p
}

func (p *pk) op(b ...byte) *pk { p.b = append(p.b, b...); return p }

// put memoizes the top of the stack, as the pickler does after every object.
func (p *pk) put() *pk {
	if p.memo < 256 {
		p.op('q', byte(p.memo))
	} else {
		p.op('r')
		p.b = binary.LittleEndian.AppendUint32(p.b, uint32(p.memo))
	}
	p.memo++
	return p
}

func (p *pk) get(i int) *pk {
	if i < 256 {
		return p.op('h', byte(i))
	}
	p.op('j')
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(i))
	return p
}

func (p *pk) str(s string) *pk {
	p.op('X')
	p.b = binary.LittleEndian.AppendUint32(p.b, uint32(len(s)))
	p.b = append(p.b, s...)
	return p.put()
}

func (p *pk) int(v int64) *pk {
	switch {
	case v >= 0 && v < 256:
		return p.op('K', byte(v))
	case v >= 0 && v < 65536:
		p.op('M')
		p.b = binary.LittleEndian.AppendUint16(p.b, uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.op('J')
		p.b = binary.LittleEndian.AppendUint32(p.b, uint32(int32(v)))
	default:
		p.op(0x8a, 8)
		p.b = binary.LittleEndian.AppendUint64(p.b, uint64(v))
	}
	return p
}

func (p *pk) bool(v bool) *pk {
	if v {
		return p.op(0x88)
	}
	return p.op(0x89)
}

func (p *pk) global(module, name string) *pk {
	p.op('c')
	p.b = append(p.b, module+"\n"+name+"\n"...)
	return p.put()
}

// ints pickles a tuple of ints the way the pickler does: TUPLE1..3 for
// short tuples, MARK ... TUPLE for longer ones.
func (p *pk) ints(v []int64) *pk {
	switch len(v) {
	case 0:
		return p.op(')')
	case 1, 2, 3:
		for _, x := range v {
			p.int(x)
		}
		return p.op(0x85 + byte(len(v)-1)).put()
	}
	p.op('(')
	for _, x := range v {
		p.int(x)
	}
	return p.op('t').put()
}

func (p *pk) emptyOrderedDict() *pk {
	return p.global("collections", "OrderedDict").op(')', 'R').put()
}

func (p *pk) stop() []byte { return append(p.op('.').b, []byte(nil)...) }

// tspec describes a tensor to pickle: a view of storage key.
type tspec struct {
	name    string
	class   string // storage class, "FloatStorage"
	key     string
	numel   int64 // storage elements
	offset  int64
	size    []int64
	stride  []int64 // nil: contiguous
	param   bool    // wrap in _rebuild_parameter
	legacy  bool    // 6-field persistent id with view metadata None
	view    []any   // legacy view metadata (key, offset, numel), or nil
	v3dtype string  // _rebuild_tensor_v3 with this dtype over an UntypedStorage
}

func contiguous(size []int64) []int64 {
	s := make([]int64, len(size))
	acc := int64(1)
	for i := len(size) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= size[i]
	}
	return s
}

// tensor pickles torch._utils._rebuild_tensor_v2(storage, offset, size,
// stride, requires_grad, OrderedDict()), as Tensor.__reduce_ex__ does.
func (p *pk) tensor(t tspec) *pk {
	if t.param {
		p.global("torch._utils", "_rebuild_parameter")
	}
	fn := "_rebuild_tensor_v2"
	if t.v3dtype != "" {
		fn = "_rebuild_tensor_v3"
	}
	p.global("torch._utils", fn)
	p.op('(') // args
	p.op('(') // persistent id
	p.str("storage")
	if t.v3dtype != "" {
		p.global("torch", "UntypedStorage")
	} else {
		p.global("torch", t.class)
	}
	p.str(t.key).str("cpu").int(t.numel)
	if t.legacy {
		if t.view == nil {
			p.op('N')
		} else {
			p.str(t.view[0].(string)).int(t.view[1].(int64)).int(t.view[2].(int64)).op(0x87).put()
		}
	}
	p.op('t').put().op('Q')
	p.int(t.offset)
	p.ints(t.size)
	stride := t.stride
	if stride == nil {
		stride = contiguous(t.size)
	}
	p.ints(stride)
	p.bool(false)
	p.emptyOrderedDict()
	if t.v3dtype != "" {
		p.global("torch", t.v3dtype)
	}
	p.op('t').put().op('R').put()
	if t.param {
		p.op(0x89).emptyOrderedDict().op(0x87).put().op('R').put()
	}
	return p
}

// stateDict pickles an OrderedDict of the tensors with SETITEMS and the
// _metadata attribute that Module.state_dict adds (applied by BUILD).
func (p *pk) stateDict(ts []tspec) *pk {
	p.emptyOrderedDict()
	p.op('(')
	for _, t := range ts {
		p.str(t.name)
		p.tensor(t)
	}
	p.op('u')
	// BUILD with {'_metadata': OrderedDict()}: attributes, not items.
	p.op('}').put().str("_metadata").emptyOrderedDict().op('s', 'b')
	return p
}

// zipEntry is one record of a test archive.
type zipEntry struct {
	name    string
	data    []byte
	deflate bool
}

// buildZip writes a torch-style archive: ROOT/data.pkl, then the storages
// under ROOT/data/KEY, then ROOT/version, all stored uncompressed.
func buildZip(t testing.TB, root string, pkl []byte, storages map[string][]byte, extra ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(e zipEntry) {
		m := zip.Store
		if e.deflate {
			m = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: m})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	add(zipEntry{name: root + "/data.pkl", data: pkl})
	add(zipEntry{name: root + "/byteorder", data: []byte("little")})
	keys := make([]string, 0, len(storages))
	for k := range storages {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add(zipEntry{name: root + "/data/" + k, data: storages[k]})
	}
	for _, e := range extra {
		add(e)
	}
	add(zipEntry{name: root + "/version", data: []byte("3\n")})
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// legacyMagicPickle pickles the legacy magic number with LONG1.
func legacyMagicPickle() []byte {
	p := newPickle(2)
	b := legacyMagic.Bytes() // big-endian, top bit clear
	p.op(0x8a, byte(len(b)))
	for i := len(b) - 1; i >= 0; i-- {
		p.b = append(p.b, b[i])
	}
	return p.stop()
}

// buildLegacy writes a legacy checkpoint: magic, protocol version, system
// info, the main pickle, the key list, then every storage as an 8-byte
// element count and its bytes.
func buildLegacy(main []byte, keys []string, storages map[string][]byte, elem map[string]int) []byte {
	var out []byte
	out = append(out, legacyMagicPickle()...)
	out = append(out, newPickle(2).int(LegacyProtocolVersion).stop()...)
	sys := newPickle(2)
	sys.op('}').put().op('(')
	sys.str("protocol_version").int(LegacyProtocolVersion)
	sys.str("little_endian").bool(true)
	sys.str("type_sizes").op('}').put().op('(').str("short").int(2).str("int").int(4).str("long").int(4).op('u')
	sys.op('u')
	out = append(out, sys.stop()...)
	out = append(out, main...)
	kp := newPickle(2)
	kp.op(']').put().op('(')
	for _, k := range keys {
		kp.str(k)
	}
	kp.op('e')
	out = append(out, kp.stop()...)
	for _, k := range keys {
		d := storages[k]
		out = binary.LittleEndian.AppendUint64(out, uint64(len(d)/elem[k]))
		out = append(out, d...)
	}
	return out
}

// zipWriter writes stored entries in the order given.
type zipWriter struct{ zw *zip.Writer }

func newZipWriter(buf *bytes.Buffer) *zipWriter { return &zipWriter{zip.NewWriter(buf)} }

func (z *zipWriter) add(t testing.TB, name string, data []byte) {
	t.Helper()
	w, err := z.zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
}

func (z *zipWriter) close(t testing.TB) {
	if err := z.zw.Close(); err != nil {
		t.Fatal(err)
	}
}
