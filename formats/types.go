package formats

import (
	"fmt"
	"slices"
	"strings"
)

// DType identifies an element type. Values 0..42 are ggml type ids; larger
// values are safetensors dtypes that have no ggml type.
type DType uint16

// ggml type ids (ggml.h). Ids 4, 5, 31..33 and 36..38 were removed from ggml.
const (
	F32     DType = 0
	F16     DType = 1
	Q4_0    DType = 2
	Q4_1    DType = 3
	Q5_0    DType = 6
	Q5_1    DType = 7
	Q8_0    DType = 8
	Q8_1    DType = 9
	Q2_K    DType = 10
	Q3_K    DType = 11
	Q4_K    DType = 12
	Q5_K    DType = 13
	Q6_K    DType = 14
	Q8_K    DType = 15
	IQ2_XXS DType = 16
	IQ2_XS  DType = 17
	IQ3_XXS DType = 18
	IQ1_S   DType = 19
	IQ4_NL  DType = 20
	IQ3_S   DType = 21
	IQ2_S   DType = 22
	IQ4_XS  DType = 23
	I8      DType = 24
	I16     DType = 25
	I32     DType = 26
	I64     DType = 27
	F64     DType = 28
	IQ1_M   DType = 29
	BF16    DType = 30
	TQ1_0   DType = 34
	TQ2_0   DType = 35
	MXFP4   DType = 39
	NVFP4   DType = 40
	Q1_0    DType = 41
	Q2_0    DType = 42
)

// GGMLTypeCount is one past the largest ggml type id sdtool knows.
const GGMLTypeCount = 43

// LinkedGGMLTypeCount is one past the largest type id the linked ggml knows;
// ids from here to GGMLTypeCount are newer (nvfp4, q1_0, q2_0).
const LinkedGGMLTypeCount = 40

// Safetensors dtypes with no ggml equivalent.
const (
	Bool DType = 100 + iota
	U8
	U16
	U32
	U64
	C64
	F8_E4M3
	F8_E5M2
	F8_E4M3FNUZ
	F8_E5M2FNUZ
	F8_E8M0
	F4
	F6_E2M3
	F6_E3M2
	dtypeEnd
)

// TypeInfo describes the storage of one element type.
type TypeInfo struct {
	// Name is ggml's lower-case type name ("q4_K", "bf16"), or the
	// lower-cased safetensors dtype for types ggml lacks ("f8_e4m3").
	Name string
	// Safetensors is the safetensors dtype string, or "" when there is none.
	Safetensors string
	// BlockSize is the number of elements in one block.
	BlockSize int
	// BlockBytes is the number of bytes in one block.
	BlockBytes int
	// Quantized reports a block-quantized ggml type.
	Quantized bool
	// Float reports a plain floating-point type (f32, f16, bf16, f64, f8, f4, f6).
	Float bool
	// Newer reports a ggml type that the linked ggml does not know (ids 40..42).
	Newer bool
}

var typeTable = map[DType]TypeInfo{
	F32:     {Name: "f32", Safetensors: "F32", BlockSize: 1, BlockBytes: 4, Float: true},
	F16:     {Name: "f16", Safetensors: "F16", BlockSize: 1, BlockBytes: 2, Float: true},
	Q4_0:    {Name: "q4_0", BlockSize: 32, BlockBytes: 18, Quantized: true},
	Q4_1:    {Name: "q4_1", BlockSize: 32, BlockBytes: 20, Quantized: true},
	Q5_0:    {Name: "q5_0", BlockSize: 32, BlockBytes: 22, Quantized: true},
	Q5_1:    {Name: "q5_1", BlockSize: 32, BlockBytes: 24, Quantized: true},
	Q8_0:    {Name: "q8_0", BlockSize: 32, BlockBytes: 34, Quantized: true},
	Q8_1:    {Name: "q8_1", BlockSize: 32, BlockBytes: 36, Quantized: true},
	Q2_K:    {Name: "q2_K", BlockSize: 256, BlockBytes: 84, Quantized: true},
	Q3_K:    {Name: "q3_K", BlockSize: 256, BlockBytes: 110, Quantized: true},
	Q4_K:    {Name: "q4_K", BlockSize: 256, BlockBytes: 144, Quantized: true},
	Q5_K:    {Name: "q5_K", BlockSize: 256, BlockBytes: 176, Quantized: true},
	Q6_K:    {Name: "q6_K", BlockSize: 256, BlockBytes: 210, Quantized: true},
	Q8_K:    {Name: "q8_K", BlockSize: 256, BlockBytes: 292, Quantized: true},
	IQ2_XXS: {Name: "iq2_xxs", BlockSize: 256, BlockBytes: 66, Quantized: true},
	IQ2_XS:  {Name: "iq2_xs", BlockSize: 256, BlockBytes: 74, Quantized: true},
	IQ3_XXS: {Name: "iq3_xxs", BlockSize: 256, BlockBytes: 98, Quantized: true},
	IQ1_S:   {Name: "iq1_s", BlockSize: 256, BlockBytes: 50, Quantized: true},
	IQ4_NL:  {Name: "iq4_nl", BlockSize: 32, BlockBytes: 18, Quantized: true},
	IQ3_S:   {Name: "iq3_s", BlockSize: 256, BlockBytes: 110, Quantized: true},
	IQ2_S:   {Name: "iq2_s", BlockSize: 256, BlockBytes: 82, Quantized: true},
	IQ4_XS:  {Name: "iq4_xs", BlockSize: 256, BlockBytes: 136, Quantized: true},
	I8:      {Name: "i8", Safetensors: "I8", BlockSize: 1, BlockBytes: 1},
	I16:     {Name: "i16", Safetensors: "I16", BlockSize: 1, BlockBytes: 2},
	I32:     {Name: "i32", Safetensors: "I32", BlockSize: 1, BlockBytes: 4},
	I64:     {Name: "i64", Safetensors: "I64", BlockSize: 1, BlockBytes: 8},
	F64:     {Name: "f64", Safetensors: "F64", BlockSize: 1, BlockBytes: 8, Float: true},
	IQ1_M:   {Name: "iq1_m", BlockSize: 256, BlockBytes: 56, Quantized: true},
	BF16:    {Name: "bf16", Safetensors: "BF16", BlockSize: 1, BlockBytes: 2, Float: true},
	TQ1_0:   {Name: "tq1_0", BlockSize: 256, BlockBytes: 54, Quantized: true},
	TQ2_0:   {Name: "tq2_0", BlockSize: 256, BlockBytes: 66, Quantized: true},
	MXFP4:   {Name: "mxfp4", BlockSize: 32, BlockBytes: 17, Quantized: true},
	NVFP4:   {Name: "nvfp4", BlockSize: 64, BlockBytes: 36, Quantized: true, Newer: true},
	Q1_0:    {Name: "q1_0", BlockSize: 128, BlockBytes: 18, Quantized: true, Newer: true},
	Q2_0:    {Name: "q2_0", BlockSize: 64, BlockBytes: 18, Quantized: true, Newer: true},

	Bool:        {Name: "bool", Safetensors: "BOOL", BlockSize: 1, BlockBytes: 1},
	U8:          {Name: "u8", Safetensors: "U8", BlockSize: 1, BlockBytes: 1},
	U16:         {Name: "u16", Safetensors: "U16", BlockSize: 1, BlockBytes: 2},
	U32:         {Name: "u32", Safetensors: "U32", BlockSize: 1, BlockBytes: 4},
	U64:         {Name: "u64", Safetensors: "U64", BlockSize: 1, BlockBytes: 8},
	C64:         {Name: "c64", Safetensors: "C64", BlockSize: 1, BlockBytes: 8},
	F8_E4M3:     {Name: "f8_e4m3", Safetensors: "F8_E4M3", BlockSize: 1, BlockBytes: 1, Float: true},
	F8_E5M2:     {Name: "f8_e5m2", Safetensors: "F8_E5M2", BlockSize: 1, BlockBytes: 1, Float: true},
	F8_E4M3FNUZ: {Name: "f8_e4m3fnuz", Safetensors: "F8_E4M3FNUZ", BlockSize: 1, BlockBytes: 1, Float: true},
	F8_E5M2FNUZ: {Name: "f8_e5m2fnuz", Safetensors: "F8_E5M2FNUZ", BlockSize: 1, BlockBytes: 1, Float: true},
	F8_E8M0:     {Name: "f8_e8m0", Safetensors: "F8_E8M0", BlockSize: 1, BlockBytes: 1, Float: true},
	F4:          {Name: "f4", Safetensors: "F4", BlockSize: 2, BlockBytes: 1, Float: true},
	F6_E2M3:     {Name: "f6_e2m3", Safetensors: "F6_E2M3", BlockSize: 4, BlockBytes: 3, Float: true},
	F6_E3M2:     {Name: "f6_e3m2", Safetensors: "F6_E3M2", BlockSize: 4, BlockBytes: 3, Float: true},
}

var (
	byName        = map[string]DType{}
	bySafetensors = map[string]DType{}
	// byLower finds a type by its name in lower case (no two ggml names
	// differ only in case, which TestTypeNamesDifferInCase checks).
	byLower = map[string]DType{}
	// sortedNames are the keys of byName, sorted.
	sortedNames []string
)

// typeInfos is typeTable as an array by id, for ids below its length:
// Info, String and the size functions run several times per tensor, and a
// map lookup each was a tenth of a header-heavy convert's time.
var typeInfos [256]struct {
	info TypeInfo
	ok   bool
}

// lookupType returns t's entry of typeTable.
func lookupType(t DType) (TypeInfo, bool) {
	if int(t) < len(typeInfos) {
		e := &typeInfos[t]
		return e.info, e.ok
	}
	info, ok := typeTable[t]
	return info, ok
}

func init() {
	for t, info := range typeTable {
		if int(t) < len(typeInfos) {
			typeInfos[t].info, typeInfos[t].ok = info, true
		}
		byName[info.Name] = t
		byLower[strings.ToLower(info.Name)] = t
		if info.Safetensors != "" {
			bySafetensors[info.Safetensors] = t
		}
		sortedNames = append(sortedNames, info.Name)
		maxTypeNameLen = max(maxTypeNameLen, 3*len(info.Name))
	}
	slices.Sort(sortedNames)
}

// Valid reports whether t is a known type.
func (t DType) Valid() bool {
	_, ok := lookupType(t)
	return ok
}

// Info returns the storage description of t; the zero TypeInfo for unknown types.
func (t DType) Info() TypeInfo {
	info, _ := lookupType(t)
	return info
}

// String returns the type's name ("q4_K", "f8_e4m3"), or "type(N)" when unknown.
func (t DType) String() string {
	if info, ok := lookupType(t); ok {
		return info.Name
	}
	return fmt.Sprintf("type(%d)", uint16(t))
}

// IsGGML reports whether t is a ggml type (ids 0..42).
func (t DType) IsGGML() bool { return t < GGMLTypeCount && t.Valid() }

// InLinkedGGML reports whether the ggml that sdtool links knows t.
func (t DType) InLinkedGGML() bool { return t.IsGGML() && t < LinkedGGMLTypeCount }

// Quantized reports whether t is a block-quantized ggml type.
func (t DType) Quantized() bool { return t.Info().Quantized }

// BitsPerElement returns the storage bits per element (4.5 for q4_0).
func (t DType) BitsPerElement() float64 {
	info := t.Info()
	if info.BlockSize == 0 {
		return 0
	}
	return float64(info.BlockBytes*8) / float64(info.BlockSize)
}

// ParseType finds a type by its ggml name (case-sensitive, as ggml spells it:
// "q4_K", "iq4_xs") or, failing that, by a case-insensitive match.
func ParseType(name string) (DType, bool) {
	if t, ok := byName[name]; ok {
		return t, true
	}
	if len(name) > maxTypeNameLen {
		return 0, false // no lower-casing of a long argument for nothing
	}
	t, ok := byLower[strings.ToLower(name)]
	return t, ok
}

// maxTypeNameLen bounds the bytes of a name that can lower-case to a type
// name: three times the longest, since lower-casing one rune can shrink it
// from three bytes to one (the Kelvin sign to "k").
var maxTypeNameLen int

// TypeByName finds a type by its exact name as ggml spells it.
func TypeByName(name string) (DType, bool) {
	t, ok := byName[name]
	return t, ok
}

// FromSafetensors maps a safetensors dtype string to its DType.
func FromSafetensors(dtype string) (DType, bool) {
	t, ok := bySafetensors[dtype]
	return t, ok
}

// SafetensorsName returns the safetensors dtype string of t, if it has one.
func (t DType) SafetensorsName() (string, bool) {
	s := t.Info().Safetensors
	return s, s != ""
}

// FromGGML maps a ggml type id to its DType.
func FromGGML(id uint32) (DType, bool) {
	if id >= GGMLTypeCount {
		return 0, false
	}
	t := DType(id)
	return t, t.Valid()
}

// Types lists every known type in id order.
func Types() []DType {
	var out []DType
	for t := DType(0); t < dtypeEnd; t++ {
		if t.Valid() {
			out = append(out, t)
		}
	}
	return out
}

// RowBytes returns the bytes taken by n consecutive elements of type t, or an
// error when n is not a whole number of blocks.
func (t DType) RowBytes(n int64) (int64, error) {
	info, ok := lookupType(t)
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint16(t))
	}
	if n < 0 {
		return 0, fmt.Errorf("negative element count %d", n)
	}
	bs := int64(info.BlockSize)
	if n%bs != 0 {
		return 0, fmt.Errorf("%d elements is not a multiple of the %s block size %d", n, info.Name, bs)
	}
	blocks := n / bs
	if blocks > 0 && blocks > (1<<62)/int64(info.BlockBytes) {
		return 0, fmt.Errorf("%d elements of %s overflow", n, info.Name)
	}
	return blocks * int64(info.BlockBytes), nil
}

// Elements returns the element count of a shape, or an error on negative
// dims or overflow.
func Elements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > (1<<62)/d {
			return 0, fmt.Errorf("shape %v overflows", shape)
		}
		n *= d
	}
	return n, nil
}

// Bytes returns the storage size of a tensor of type t and shape (PyTorch
// order). The innermost dimension must be a whole number of blocks, as ggml
// requires; for packed sub-byte safetensors types the total must be.
func (t DType) Bytes(shape []int64) (int64, error) {
	n, err := Elements(shape)
	if err != nil {
		return 0, err
	}
	info, ok := lookupType(t)
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint16(t))
	}
	if info.Quantized && len(shape) > 0 && shape[len(shape)-1]%int64(info.BlockSize) != 0 {
		return 0, fmt.Errorf("row of %d elements is not a multiple of the %s block size %d",
			shape[len(shape)-1], info.Name, info.BlockSize)
	}
	return t.RowBytes(n)
}
