package ckpt

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// Limits of the restricted unpickler. Real checkpoints stay far below them
// (a Stable Diffusion data.pkl is about 1 MB, SETITEMS batches hold 1000
// pairs, tensors have at most 5 dims); they exist so that a crafted file
// cannot make the reader allocate without bound.
const (
	// MaxPickleSize is the largest pickle stream read, in bytes.
	MaxPickleSize = 256 << 20
	maxStack      = 1 << 20 // values on the stack at once
	maxMemo       = 1 << 22 // memo entries
	// maxObjects and maxBuiltBytes bound what one pickle may build. A
	// tensor costs a checkpoint pickle about 16 values (its rebuild call,
	// the storage tuple and its strings, the size and stride tuples, the
	// dict entry), so 2M values cover 130k tensors, far beyond any model;
	// bytes count container slots and string payloads.
	maxObjects    = 1 << 21
	maxBuiltBytes = 1 << 28
	maxLine       = 1 << 10 // bytes in a GLOBAL or text INT/LONG line
	maxDims       = 16      // dims of one tensor
	maxLongBytes  = 1 << 10 // bytes of a LONG1/LONG4 integer
)

// Values the unpickler builds. Plain Python values map to Go ones: None is
// nil, bool, int64 (or pyBigInt beyond 64 bits), float64, string, []byte.
type (
	pyTuple  []any
	pyBigInt struct{ v *big.Int }
	pyList   struct{ items []any }
	// pyDict keeps insertion order; index finds scalar keys for replacement.
	pyDict struct {
		keys  []any
		vals  []any
		index map[any]int
	}
	// pyGlobal is an allow-listed global (see resolveGlobal).
	pyGlobal struct {
		module, name string
		kind         globalKind
		dtype        formats.DType // storage classes and dtypes
	}
	// storageRef is a persistent id: a reference to a storage record that
	// the container (zip entry or legacy blob) resolves.
	storageRef struct {
		dtype    formats.DType
		untyped  bool // torch.UntypedStorage: numel counts bytes
		key      string
		location string
		numel    int64
		// Legacy view metadata: the tensor's storage is viewNumel elements
		// of the root storage key (numel elements) from element viewOffset.
		viewKey    string // the view's own key, kept for errors
		viewOffset int64
		viewNumel  int64
		hasView    bool
	}
	// tensorVal is a rebuilt tensor: a view of a storage. It is checked
	// (contiguity, bounds) when it is collected under a name.
	tensorVal struct {
		storage  *storageRef
		offset   int64 // in elements of dtype
		size     []int64
		stride   []int64
		dtype    formats.DType
		rebuild  string // the rebuild function, for errors
		badValue string // why the arguments were unusable, reported with the name
	}
)

type globalKind int

const (
	gRebuildTensor globalKind = iota + 1
	gRebuildTensorV2
	gRebuildTensorV3
	gRebuildParameter
	gRebuildParameterState
	gOrderedDict
	gTorchSize
	gStorage
	gDtype
)

// storageDTypes maps torch's typed storage classes to element types.
var storageDTypes = map[string]formats.DType{
	"FloatStorage":        formats.F32,
	"DoubleStorage":       formats.F64,
	"HalfStorage":         formats.F16,
	"BFloat16Storage":     formats.BF16,
	"IntStorage":          formats.I32,
	"LongStorage":         formats.I64,
	"ShortStorage":        formats.I16,
	"CharStorage":         formats.I8,
	"ByteStorage":         formats.U8,
	"BoolStorage":         formats.Bool,
	"ComplexFloatStorage": formats.C64,
}

// torchDTypes maps torch dtype globals (as _rebuild_tensor_v3 passes them,
// for the dtypes newer torch saves with untyped storages) to element types.
var torchDTypes = map[string]formats.DType{
	"float32": formats.F32, "float": formats.F32,
	"float64": formats.F64, "double": formats.F64,
	"float16": formats.F16, "half": formats.F16,
	"bfloat16": formats.BF16,
	"int32":    formats.I32, "int": formats.I32,
	"int64": formats.I64, "long": formats.I64,
	"int16": formats.I16, "short": formats.I16,
	"int8":   formats.I8,
	"uint8":  formats.U8,
	"bool":   formats.Bool,
	"uint16": formats.U16, "uint32": formats.U32, "uint64": formats.U64,
	"complex64":       formats.C64,
	"float8_e4m3fn":   formats.F8_E4M3,
	"float8_e5m2":     formats.F8_E5M2,
	"float8_e4m3fnuz": formats.F8_E4M3FNUZ,
	"float8_e5m2fnuz": formats.F8_E5M2FNUZ,
	"float8_e8m0fnu":  formats.F8_E8M0,
}

// resolveGlobal is the allow-list: the only globals a checkpoint may name.
// Nothing is ever imported or called; an allowed global only selects which
// of the few constructors below builds a plain Go value.
func resolveGlobal(module, name string) (*pyGlobal, error) {
	g := &pyGlobal{module: module, name: name}
	switch module + "." + name {
	case "torch._utils._rebuild_tensor":
		g.kind = gRebuildTensor
	case "torch._utils._rebuild_tensor_v2":
		g.kind = gRebuildTensorV2
	case "torch._utils._rebuild_tensor_v3":
		g.kind = gRebuildTensorV3
	case "torch._utils._rebuild_parameter":
		g.kind = gRebuildParameter
	case "torch._utils._rebuild_parameter_with_state":
		g.kind = gRebuildParameterState
	case "collections.OrderedDict":
		g.kind = gOrderedDict
	case "torch.Size":
		g.kind = gTorchSize
	case "torch.UntypedStorage", "torch.storage.UntypedStorage":
		g.kind, g.dtype = gStorage, formats.U8
	}
	if g.kind != 0 {
		return g, nil
	}
	if module == "torch" || module == "torch.cuda" {
		if t, ok := storageDTypes[name]; ok {
			g.kind, g.dtype = gStorage, t
			return g, nil
		}
	}
	if module == "torch" {
		if t, ok := torchDTypes[name]; ok {
			g.kind, g.dtype = gDtype, t
			return g, nil
		}
	}
	return nil, fmt.Errorf("global %s is not allowed (only tensor rebuilding is supported; nothing in the file is executed)", printable(module+"."+name))
}

// printable returns s as it is when it is plain printable ASCII (every real
// module and name is), else quoted, so that errors never carry raw bytes.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return strconv.Quote(s)
		}
	}
	return s
}

// errTruncated is wrapped when the stream ends inside an opcode.
var errTruncated = errors.New("pickle is truncated")

// source reads a pickle stream, counting the bytes consumed so that a
// legacy checkpoint knows where the data after its pickles starts, and
// bounding every length by the bytes that really remain.
type source struct {
	r     *bufio.Reader
	pos   int64 // bytes consumed
	limit int64 // bytes available from position 0
}

func newSource(r io.Reader, start, limit int64) *source {
	size := int64(64 << 10)
	if rem := limit - start; rem < size {
		size = max(rem, 16) // small pickles (legacy headers, Match) need no large buffer
	}
	return &source{r: bufio.NewReaderSize(r, int(size)), pos: start, limit: limit}
}

func (s *source) readByte() (byte, error) {
	if s.pos >= s.limit {
		return 0, errTruncated
	}
	c, err := s.r.ReadByte()
	if err != nil {
		return 0, errTruncated
	}
	s.pos++
	return c, nil
}

// read returns the next n bytes; n is checked against the bytes left before
// anything is allocated.
func (s *source) read(n int64) ([]byte, error) {
	if n < 0 || n > s.limit-s.pos {
		return nil, errTruncated
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, errTruncated
	}
	s.pos += n
	return b, nil
}

func (s *source) line() (string, error) {
	var b []byte
	for {
		c, err := s.readByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return string(b), nil
		}
		if len(b) >= maxLine {
			return "", fmt.Errorf("line longer than %d bytes", maxLine)
		}
		b = append(b, c)
	}
}

func (s *source) uint(n int) (uint64, error) {
	var buf [8]byte
	for i := range n {
		c, err := s.readByte()
		if err != nil {
			return 0, err
		}
		buf[i] = c
	}
	return binary.LittleEndian.Uint64(buf[:]), nil
}

// unpickler is a restricted pickle virtual machine: it knows the opcodes
// torch.save emits (protocols 1 to 5) and builds only plain values, tensors
// and storage references.
type unpickler struct {
	src   *source
	stack []any
	marks []int
	// The memo: indices are dense in practice (the pickler counts up), so
	// they live in a slice; a far-off index goes to sparse, so that one
	// crafted LONG_BINPUT cannot make the slice huge.
	memo    []memoEntry
	sparse  map[uint64]any
	nmemo   int // entries defined, which MEMOIZE uses as its index
	globals map[[2]string]*pyGlobal
	op      int64 // position of the current opcode, for errors
	// storages holds the first reference to each storage key.
	storages map[string]*storageRef
	// objects and built count what has been built, against maxObjects and
	// maxBuiltBytes.
	objects, built int64
}

type memoEntry struct {
	v   any
	set bool
}

// pickleError locates a problem in the stream.
type pickleError struct {
	pos int64
	msg string
}

func (e *pickleError) Error() string { return fmt.Sprintf("byte %d: %s", e.pos, e.msg) }

// Pickle opcodes (pickletools names).
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opBinFloat       = 'G'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opBinString      = 'T'
	opShortBinString = 'U'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opAppends        = 'e'
	opBinGet         = 'h'
	opLongBinGet     = 'j'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opSetItems       = 'u'
	opEmptyDict      = '}'
	opEmptyList      = ']'
	opEmptyTuple     = ')'
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opProto          = 0x80
	opNewObj         = 0x81
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opLong4          = 0x8b
	opShortBinUni    = 0x8c
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opNewObjEx       = 0x92
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
)

// unpickle runs one pickle (up to and including STOP) from src. It returns
// the value and the storages its persistent ids refer to, by key.
func unpickle(src *source) (any, map[string]*storageRef, error) {
	u := &unpickler{src: src, storages: map[string]*storageRef{}}
	v, err := u.run()
	if err != nil {
		return nil, nil, &pickleError{pos: u.op, msg: err.Error()}
	}
	return v, u.storages, nil
}

// spend charges objs new values and n bytes to the pickle's budget.
func (u *unpickler) spend(objs, n int64) error {
	u.objects += objs
	u.built += n
	if u.objects > maxObjects {
		return fmt.Errorf("builds more than %d values, more than any checkpoint needs", maxObjects)
	}
	if u.built > maxBuiltBytes {
		return fmt.Errorf("builds more than %d MiB of values, more than any checkpoint needs", maxBuiltBytes>>20)
	}
	return nil
}

// pushNew pushes a value built by the current opcode, charging it (and its
// n payload bytes) to the budget; values fetched again (GET, DUP) are free,
// since only the containers they are added to grow.
func (u *unpickler) pushNew(v any, n int64) error {
	if err := u.spend(1, 16+n); err != nil {
		return err
	}
	return u.push(v)
}

func (u *unpickler) push(v any) error {
	if len(u.stack) >= maxStack {
		return fmt.Errorf("more than %d values on the stack", maxStack)
	}
	u.stack = append(u.stack, v)
	return nil
}

func (u *unpickler) pop() (any, error) {
	base := 0
	if len(u.marks) > 0 {
		base = u.marks[len(u.marks)-1]
	}
	if len(u.stack) <= base {
		return nil, errors.New("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	base := 0
	if len(u.marks) > 0 {
		base = u.marks[len(u.marks)-1]
	}
	if len(u.stack) <= base {
		return nil, errors.New("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the values pushed since the last MARK and removes them and the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) put(idx uint64) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	// An index stays where it was first stored, even once the dense part
	// has grown past it, so that it is never counted twice.
	if _, ok := u.sparse[idx]; ok {
		u.sparse[idx] = v
		return nil
	}
	if idx < uint64(len(u.memo)) {
		if !u.memo[idx].set {
			u.nmemo++
		}
		u.memo[idx] = memoEntry{v, true}
		return nil
	}
	if u.nmemo >= maxMemo {
		return fmt.Errorf("more than %d memo entries", maxMemo)
	}
	u.nmemo++
	// The dense part grows only to twice the entries defined (plus a
	// little), so that indexes which keep doubling cannot make it huge.
	if idx < uint64(2*u.nmemo+1024) {
		if err := u.spend(0, 24*int64(int(idx)+1-len(u.memo))); err != nil {
			return err
		}
		u.memo = append(u.memo, make([]memoEntry, int(idx)+1-len(u.memo))...)
		u.memo[idx] = memoEntry{v, true}
		return nil
	}
	if err := u.spend(0, 48); err != nil {
		return err
	}
	if u.sparse == nil {
		u.sparse = map[uint64]any{}
	}
	u.sparse[idx] = v
	return nil
}

func (u *unpickler) get(idx uint64) error {
	if idx < uint64(len(u.memo)) && u.memo[idx].set {
		return u.push(u.memo[idx].v)
	}
	v, ok := u.sparse[idx]
	if !ok {
		return fmt.Errorf("memo entry %d is not defined", idx)
	}
	return u.push(v)
}

func (u *unpickler) run() (any, error) {
	s := u.src
	for {
		u.op = s.pos
		op, err := s.readByte()
		if err != nil {
			return nil, err
		}
		switch op {
		case opStop:
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			return v, nil
		case opProto:
			p, err := s.readByte()
			if err != nil {
				return nil, err
			}
			if p > 5 {
				return nil, fmt.Errorf("unsupported pickle protocol %d", p)
			}
		case opFrame:
			// Frames only group opcodes for buffering; their contents are read as usual.
			if _, err := s.uint(8); err != nil {
				return nil, err
			}
		case opMark:
			if len(u.marks) >= maxStack {
				return nil, fmt.Errorf("more than %d nested MARKs", maxStack)
			}
			u.marks = append(u.marks, len(u.stack))
		case opPop:
			if len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
				u.marks = u.marks[:len(u.marks)-1] // POP of a bare mark, as CPython does
				continue
			}
			if _, err := u.pop(); err != nil {
				return nil, err
			}
		case opPopMark:
			if _, err := u.popMark(); err != nil {
				return nil, err
			}
		case opDup:
			v, err := u.top()
			if err != nil {
				return nil, err
			}
			err = u.push(v)
			if err != nil {
				return nil, err
			}
		case opNone:
			err = u.pushNew(nil, 0)
		case opNewTrue:
			err = u.pushNew(true, 0)
		case opNewFalse:
			err = u.pushNew(false, 0)
		case opBinInt:
			var v uint64
			if v, err = s.uint(4); err == nil {
				err = u.pushNew(int64(int32(uint32(v))), 0)
			}
		case opBinInt1:
			var v uint64
			if v, err = s.uint(1); err == nil {
				err = u.pushNew(int64(v), 0)
			}
		case opBinInt2:
			var v uint64
			if v, err = s.uint(2); err == nil {
				err = u.pushNew(int64(v), 0)
			}
		case opInt:
			err = u.textInt()
		case opLong:
			err = u.textLong()
		case opLong1, opLong4:
			n := 1
			if op == opLong4 {
				n = 4
			}
			var ln uint64
			if ln, err = s.uint(n); err != nil {
				return nil, err
			}
			if ln > maxLongBytes {
				return nil, fmt.Errorf("integer of %d bytes is longer than %d", ln, maxLongBytes)
			}
			var b []byte
			if b, err = s.read(int64(ln)); err == nil {
				err = u.pushNew(decodeLong(b), 0)
			}
		case opBinFloat:
			var b []byte
			if b, err = s.read(8); err == nil {
				err = u.pushNew(math.Float64frombits(binary.BigEndian.Uint64(b)), 0)
			}
		case opBinUnicode, opShortBinUni, opBinUnicode8, opBinString, opShortBinString:
			var b []byte
			if b, err = u.counted(op); err == nil {
				err = u.pushNew(string(b), int64(len(b)))
			}
		case opBinBytes, opShortBinBytes, opBinBytes8:
			var b []byte
			if b, err = u.counted(op); err == nil {
				err = u.pushNew(b, int64(len(b)))
			}
		case opEmptyDict:
			err = u.pushNew(&pyDict{}, 64)
		case opEmptyList:
			err = u.pushNew(&pyList{}, 32)
		case opEmptyTuple:
			err = u.pushNew(pyTuple{}, 0)
		case opTuple:
			var items []any
			if items, err = u.popMark(); err == nil {
				err = u.pushNew(pyTuple(items), 16*int64(len(items)))
			}
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			t := make(pyTuple, n)
			for i := n - 1; i >= 0; i-- {
				if t[i], err = u.pop(); err != nil {
					return nil, err
				}
			}
			err = u.pushNew(t, 16*int64(n))
		case opBinPut:
			var i uint64
			if i, err = s.uint(1); err == nil {
				err = u.put(i)
			}
		case opLongBinPut:
			var i uint64
			if i, err = s.uint(4); err == nil {
				err = u.put(i)
			}
		case opMemoize:
			err = u.put(uint64(u.nmemo))
		case opBinGet:
			var i uint64
			if i, err = s.uint(1); err == nil {
				err = u.get(i)
			}
		case opLongBinGet:
			var i uint64
			if i, err = s.uint(4); err == nil {
				err = u.get(i)
			}
		case opAppend:
			var v any
			if v, err = u.pop(); err == nil {
				err = u.appendTo([]any{v})
			}
		case opAppends:
			var items []any
			if items, err = u.popMark(); err == nil {
				err = u.appendTo(items)
			}
		case opSetItem:
			var k, v any
			if v, err = u.pop(); err != nil {
				return nil, err
			}
			if k, err = u.pop(); err != nil {
				return nil, err
			}
			err = u.setItems([]any{k, v})
		case opSetItems:
			var items []any
			if items, err = u.popMark(); err == nil {
				err = u.setItems(items)
			}
		case opGlobal:
			var mod, name string
			if mod, err = s.line(); err != nil {
				return nil, err
			}
			if name, err = s.line(); err != nil {
				return nil, err
			}
			err = u.global(mod, name)
		case opStackGlobal:
			var mod, name any
			if name, err = u.pop(); err != nil {
				return nil, err
			}
			if mod, err = u.pop(); err != nil {
				return nil, err
			}
			ms, ok1 := mod.(string)
			ns, ok2 := name.(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("STACK_GLOBAL with a %s and a %s, want two strings", typeName(mod), typeName(name))
			}
			err = u.global(ms, ns)
		case opReduce, opNewObj:
			var fn, args any
			if args, err = u.pop(); err != nil {
				return nil, err
			}
			if fn, err = u.pop(); err != nil {
				return nil, err
			}
			var v any
			if v, err = call(fn, args, nil); err == nil {
				err = u.pushNew(v, 128)
			}
		case opNewObjEx:
			var fn, args, kw any
			if kw, err = u.pop(); err != nil {
				return nil, err
			}
			if args, err = u.pop(); err != nil {
				return nil, err
			}
			if fn, err = u.pop(); err != nil {
				return nil, err
			}
			var v any
			if v, err = call(fn, args, kw); err == nil {
				err = u.pushNew(v, 128)
			}
		case opBuild:
			var state, obj any
			if state, err = u.pop(); err != nil {
				return nil, err
			}
			if obj, err = u.top(); err != nil {
				return nil, err
			}
			// The state of an OrderedDict (state_dict's _metadata) or a tensor
			// holds attributes, not items: it is dropped, never applied.
			switch obj.(type) {
			case *pyDict, *tensorVal:
			default:
				return nil, fmt.Errorf("BUILD on a %s is not supported (state %s)", typeName(obj), typeName(state))
			}
		case opBinPersID:
			var pid any
			if pid, err = u.pop(); err != nil {
				return nil, err
			}
			var ref *storageRef
			if ref, err = persistentLoad(pid); err == nil {
				if _, seen := u.storages[ref.key]; !seen {
					u.storages[ref.key] = ref
				}
				err = u.pushNew(ref, 128)
			}
		default:
			return nil, fmt.Errorf("unsupported pickle opcode 0x%02x", op)
		}
		if err != nil {
			return nil, err
		}
	}
}

// counted reads the payload of a length-prefixed string or bytes opcode.
func (u *unpickler) counted(op byte) ([]byte, error) {
	n := 4
	switch op {
	case opShortBinUni, opShortBinString, opShortBinBytes:
		n = 1
	case opBinUnicode8, opBinBytes8:
		n = 8
	}
	ln, err := u.src.uint(n)
	if err != nil {
		return nil, err
	}
	if op == opBinString && int32(uint32(ln)) < 0 {
		return nil, errors.New("BINSTRING with a negative length")
	}
	if ln > uint64(MaxPickleSize) {
		return nil, errTruncated
	}
	return u.src.read(int64(ln))
}

// textInt reads protocol 0/1 INT: a decimal line, "00"/"01" for False/True.
func (u *unpickler) textInt() error {
	ln, err := u.src.line()
	if err != nil {
		return err
	}
	switch ln {
	case "00":
		return u.pushNew(false, 0)
	case "01":
		return u.pushNew(true, 0)
	}
	v, err := strconv.ParseInt(ln, 10, 64)
	if err != nil {
		return fmt.Errorf("INT %q is not a decimal integer", ln)
	}
	return u.pushNew(v, 0)
}

// textLong reads protocol 0/1 LONG: a decimal line with an optional L suffix.
func (u *unpickler) textLong() error {
	ln, err := u.src.line()
	if err != nil {
		return err
	}
	b, ok := new(big.Int).SetString(strings.TrimSuffix(ln, "L"), 10)
	if !ok {
		return fmt.Errorf("LONG %q is not a decimal integer", ln)
	}
	if b.IsInt64() {
		return u.pushNew(b.Int64(), 0)
	}
	return u.pushNew(pyBigInt{b}, 0)
}

// decodeLong decodes a little-endian two's complement integer.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var buf [8]byte
		copy(buf[:], b)
		if b[len(b)-1]&0x80 != 0 {
			for i := len(b); i < 8; i++ {
				buf[i] = 0xff
			}
		}
		return int64(binary.LittleEndian.Uint64(buf[:]))
	}
	be := make([]byte, len(b))
	for i, c := range b {
		be[len(b)-1-i] = c
	}
	v := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if v.IsInt64() {
		return v.Int64()
	}
	return pyBigInt{v}
}

func (u *unpickler) global(module, name string) error {
	k := [2]string{module, name}
	g := u.globals[k]
	if g == nil {
		var err error
		if g, err = resolveGlobal(module, name); err != nil {
			return err
		}
		if u.globals == nil {
			u.globals = map[[2]string]*pyGlobal{}
		}
		u.globals[k] = g // allowed globals are immutable, so one value serves every use
	}
	return u.push(g)
}

func (u *unpickler) appendTo(items []any) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	l, ok := v.(*pyList)
	if !ok {
		return fmt.Errorf("APPEND to a %s", typeName(v))
	}
	if err := u.spend(0, 16*int64(len(items))); err != nil {
		return err
	}
	l.items = append(l.items, items...)
	return nil
}

func (u *unpickler) setItems(items []any) error {
	if len(items)%2 != 0 {
		return fmt.Errorf("SETITEMS with an odd number (%d) of values", len(items))
	}
	v, err := u.top()
	if err != nil {
		return err
	}
	d, ok := v.(*pyDict)
	if !ok {
		return fmt.Errorf("SETITEM on a %s", typeName(v))
	}
	// A pair costs its two slots and an index entry.
	if err := u.spend(0, 48*int64(len(items)/2)); err != nil {
		return err
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// set stores v under k; a repeated scalar key replaces the value in place,
// as in a Python dict.
func (d *pyDict) set(k, v any) error {
	switch k.(type) {
	case string, int64, bool, float64, nil:
		if d.index == nil {
			d.index = map[any]int{}
		}
		if i, ok := d.index[k]; ok {
			d.vals[i] = v
			return nil
		}
		d.index[k] = len(d.keys)
	case pyTuple, pyBigInt, []byte:
		// Hashable in Python, but not comparable in Go; such keys never hold
		// tensors worth naming, so they are kept without de-duplication.
	default:
		return fmt.Errorf("unhashable dict key of type %s", typeName(k))
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// call applies an allow-listed global to its arguments (REDUCE, NEWOBJ).
func call(fn, args, kw any) (any, error) {
	g, ok := fn.(*pyGlobal)
	if !ok {
		return nil, fmt.Errorf("call of a %s", typeName(fn))
	}
	a, ok := args.(pyTuple)
	if !ok {
		return nil, fmt.Errorf("%s.%s called with a %s, want a tuple", g.module, g.name, typeName(args))
	}
	if kw != nil {
		if d, ok := kw.(*pyDict); !ok || len(d.keys) > 0 {
			return nil, fmt.Errorf("%s.%s called with keyword arguments", g.module, g.name)
		}
	}
	switch g.kind {
	case gOrderedDict:
		d := &pyDict{}
		if len(a) == 0 {
			return d, nil
		}
		// OrderedDict(list of (key, value) pairs).
		var pairs []any
		switch p := a[0].(type) {
		case *pyList:
			pairs = p.items
		case pyTuple:
			pairs = p
		default:
			return nil, fmt.Errorf("OrderedDict of a %s", typeName(a[0]))
		}
		if len(a) > 1 {
			return nil, fmt.Errorf("OrderedDict with %d arguments", len(a))
		}
		for _, p := range pairs {
			kv, ok := p.(pyTuple)
			if !ok || len(kv) != 2 {
				return nil, fmt.Errorf("OrderedDict item is a %s, want a (key, value) pair", typeName(p))
			}
			if err := d.set(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
		return d, nil
	case gTorchSize:
		if len(a) == 0 {
			return pyTuple{}, nil
		}
		t, ok := a[0].(pyTuple)
		if !ok || len(a) != 1 {
			return nil, fmt.Errorf("torch.Size of %d values, want one tuple", len(a))
		}
		return t, nil
	case gRebuildTensor, gRebuildTensorV2, gRebuildTensorV3:
		return rebuildTensor(g, a), nil
	case gRebuildParameter, gRebuildParameterState:
		if len(a) < 1 {
			return nil, fmt.Errorf("%s without arguments", g.name)
		}
		if _, ok := a[0].(*tensorVal); !ok {
			return nil, fmt.Errorf("%s of a %s, want a tensor", g.name, typeName(a[0]))
		}
		return a[0], nil
	}
	return nil, fmt.Errorf("calling %s.%s is not supported", g.module, g.name)
}

// rebuildTensor records the arguments of torch._utils._rebuild_tensor*:
// (storage, storage_offset, size, stride, ...), with the dtype as the 7th
// argument of v3. Bad arguments are kept as badValue so that the error can
// name the tensor once its key is known.
func rebuildTensor(g *pyGlobal, a pyTuple) *tensorVal {
	t := &tensorVal{rebuild: g.name}
	want := 4
	switch g.kind {
	case gRebuildTensorV2:
		want = 6
	case gRebuildTensorV3:
		want = 7
	}
	if len(a) < want {
		t.badValue = fmt.Sprintf("%s has %d arguments, want at least %d", g.name, len(a), want)
		return t
	}
	st, ok := a[0].(*storageRef)
	if !ok {
		t.badValue = fmt.Sprintf("%s storage is a %s", g.name, typeName(a[0]))
		return t
	}
	t.storage = st
	t.dtype = st.dtype
	off, ok := a[1].(int64)
	if !ok || off < 0 {
		t.badValue = fmt.Sprintf("storage offset %s is not a non-negative integer", describe(a[1]))
		return t
	}
	t.offset = off
	var err error
	if t.size, err = intTuple(a[2], "size"); err != nil {
		t.badValue = err.Error()
		return t
	}
	if t.stride, err = intTuple(a[3], "stride"); err != nil {
		t.badValue = err.Error()
		return t
	}
	if len(t.size) != len(t.stride) {
		t.badValue = fmt.Sprintf("size %v and stride %v differ in length", t.size, t.stride)
		return t
	}
	if g.kind == gRebuildTensorV3 {
		dt, ok := a[6].(*pyGlobal)
		if !ok || dt.kind != gDtype {
			t.badValue = fmt.Sprintf("dtype argument is a %s, want a torch dtype", typeName(a[6]))
			return t
		}
		t.dtype = dt.dtype
	} else if st.untyped {
		t.badValue = "an untyped storage needs _rebuild_tensor_v3 and a dtype"
	}
	return t
}

func intTuple(v any, what string) ([]int64, error) {
	t, ok := v.(pyTuple)
	if !ok {
		return nil, fmt.Errorf("%s is a %s, want a tuple of integers", what, typeName(v))
	}
	if len(t) > maxDims {
		return nil, fmt.Errorf("%s has %d dims, more than %d", what, len(t), maxDims)
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("%s[%d] is a %s, want an integer", what, i, typeName(x))
		}
		out[i] = n
	}
	return out, nil
}

// persistentLoad turns torch's persistent id into a storage reference. Zip
// checkpoints use ('storage', type, key, location, numel); legacy ones add
// view metadata: None or (view_key, offset, view_numel).
func persistentLoad(pid any) (*storageRef, error) {
	t, ok := pid.(pyTuple)
	if !ok || len(t) == 0 {
		return nil, fmt.Errorf("persistent id is a %s, want a tuple", typeName(pid))
	}
	if kind, _ := t[0].(string); kind != "storage" {
		return nil, fmt.Errorf("persistent id of kind %s is not supported (only storages)", describe(t[0]))
	}
	if len(t) != 5 && len(t) != 6 {
		return nil, fmt.Errorf("storage persistent id has %d fields, want 5 or 6", len(t))
	}
	g, ok := t[1].(*pyGlobal)
	if !ok || g.kind != gStorage {
		return nil, fmt.Errorf("storage type is a %s, want a torch storage class", typeName(t[1]))
	}
	ref := &storageRef{dtype: g.dtype, untyped: g.dtype == formats.U8 && strings.HasSuffix(g.name, "UntypedStorage")}
	var err error
	if ref.key, err = keyString(t[2]); err != nil {
		return nil, err
	}
	ref.location, _ = t[3].(string)
	n, ok := t[4].(int64)
	if !ok || n < 0 {
		return nil, fmt.Errorf("storage %q size %s is not a non-negative integer", ref.key, describe(t[4]))
	}
	ref.numel = n
	if len(t) == 6 && t[5] != nil {
		v, ok := t[5].(pyTuple)
		if !ok || len(v) != 3 {
			return nil, fmt.Errorf("storage %q view metadata is a %s, want (key, offset, size)", ref.key, typeName(t[5]))
		}
		view, err := keyString(v[0])
		if err != nil {
			return nil, err
		}
		off, ok1 := v[1].(int64)
		vn, ok2 := v[2].(int64)
		if !ok1 || !ok2 || off < 0 || vn < 0 {
			return nil, fmt.Errorf("storage %q view offset %s and size %s are not non-negative integers", ref.key, describe(v[1]), describe(v[2]))
		}
		ref.viewKey, ref.viewOffset, ref.viewNumel, ref.hasView = view, off, vn, true
	}
	return ref, nil
}

func keyString(v any) (string, error) {
	switch k := v.(type) {
	case string:
		return k, nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	}
	return "", fmt.Errorf("storage key is a %s, want a string", typeName(v))
}

func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, pyBigInt:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case pyTuple:
		return "tuple"
	case *pyList:
		return "list"
	case *pyDict:
		return "dict"
	case *pyGlobal:
		return x.module + "." + x.name
	case *storageRef:
		return "storage"
	case *tensorVal:
		return "tensor"
	}
	return fmt.Sprintf("%T", v)
}

func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case pyBigInt:
		return x.v.String()
	}
	return "a " + typeName(v)
}
