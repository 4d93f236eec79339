//go:build cgo

package ggmltest

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

// The part of ggml's GGUF API (gguf.h) and context API (ggml.h) that
// ReadGGUF calls. Enums are passed as int, their C ABI type.
struct gguf_context;
struct ggml_context;
struct gguf_init_params {
	bool no_alloc;
	struct ggml_context ** ctx;
};
struct gguf_context * gguf_init_from_file(const char * fname, struct gguf_init_params params);
void gguf_free(struct gguf_context * ctx);
uint32_t gguf_get_version(const struct gguf_context * ctx);
size_t gguf_get_alignment(const struct gguf_context * ctx);
size_t gguf_get_data_offset(const struct gguf_context * ctx);
int64_t gguf_get_n_kv(const struct gguf_context * ctx);
const char * gguf_get_key(const struct gguf_context * ctx, int64_t key_id);
int gguf_get_kv_type(const struct gguf_context * ctx, int64_t key_id);
int gguf_get_arr_type(const struct gguf_context * ctx, int64_t key_id);
size_t gguf_get_arr_n(const struct gguf_context * ctx, int64_t key_id);
const void * gguf_get_arr_data(const struct gguf_context * ctx, int64_t key_id);
const char * gguf_get_arr_str(const struct gguf_context * ctx, int64_t key_id, size_t i);
const void * gguf_get_val_data(const struct gguf_context * ctx, int64_t key_id);
const char * gguf_get_val_str(const struct gguf_context * ctx, int64_t key_id);
int64_t gguf_get_n_tensors(const struct gguf_context * ctx);
size_t gguf_get_tensor_offset(const struct gguf_context * ctx, int64_t tensor_id);
const char * gguf_get_tensor_name(const struct gguf_context * ctx, int64_t tensor_id);
int gguf_get_tensor_type(const struct gguf_context * ctx, int64_t tensor_id);
size_t gguf_get_tensor_size(const struct gguf_context * ctx, int64_t tensor_id);

struct ggml_tensor;
struct ggml_tensor * ggml_get_tensor(struct ggml_context * ctx, const char * name);
void ggml_free(struct ggml_context * ctx);

// The leading fields of struct ggml_tensor (ggml.h), the only ones read.
struct sdt_gguf_tensor_prefix {
	int type;
	void * buffer;
	int64_t ne[4];
	size_t nb[4];
};

static struct gguf_context * sdt_gguf_open(const char * fname, struct ggml_context ** ctx) {
	struct gguf_init_params p = { true, ctx };
	return gguf_init_from_file(fname, p);
}

static int64_t sdt_gguf_ne(struct ggml_context * ctx, const char * name, int i) {
	struct ggml_tensor * t = ggml_get_tensor(ctx, name);
	if (t == NULL) {
		return -1;
	}
	return ((struct sdt_gguf_tensor_prefix *) t)->ne[i];
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/sdtool/sdtool/formats"
)

// GGUFInfo is what ggml's GGUF reader sees in a file.
type GGUFInfo struct {
	// Version is the GGUF version.
	Version int
	// Alignment is the data alignment.
	Alignment int
	// DataOffset is the absolute offset of the data section.
	DataOffset int64
	// KVs lists the metadata in file order.
	KVs []formats.KV
	// Tensors lists the tensor infos in file order.
	Tensors []GGUFTensor
}

// GGUFTensor is one tensor info as ggml reads it.
type GGUFTensor struct {
	// Name is the tensor name.
	Name string
	// Type is the ggml type.
	Type formats.DType
	// NE holds the four dims in ggml order, 1 past the stored n_dims (ggml
	// keeps no n_dims).
	NE [4]int64
	// Offset is relative to the data section.
	Offset int64
	// Size is ggml_nbytes of the tensor.
	Size int64
}

// ReadGGUF opens path with ggml's gguf_init_from_file (no_alloc, with a
// ggml context for the dims) and lists what it read. ggml prints its reason
// for refusing a file on stderr; the error only says that it refused.
func ReadGGUF(path string) (*GGUFInfo, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var gctx *C.struct_ggml_context
	ctx := C.sdt_gguf_open(cpath, &gctx)
	if ctx == nil {
		return nil, fmt.Errorf("ggml: gguf_init_from_file refused %s", path)
	}
	defer C.gguf_free(ctx)
	if gctx != nil {
		defer C.ggml_free(gctx)
	}
	info := &GGUFInfo{
		Version:    int(C.gguf_get_version(ctx)),
		Alignment:  int(C.gguf_get_alignment(ctx)),
		DataOffset: int64(C.gguf_get_data_offset(ctx)),
	}
	for i := C.int64_t(0); i < C.gguf_get_n_kv(ctx); i++ {
		info.KVs = append(info.KVs, readKV(ctx, i))
	}
	for i := C.int64_t(0); i < C.gguf_get_n_tensors(ctx); i++ {
		cname := C.gguf_get_tensor_name(ctx, i)
		t := GGUFTensor{
			Name:   C.GoString(cname),
			Type:   formats.DType(C.gguf_get_tensor_type(ctx, i)),
			Offset: int64(C.gguf_get_tensor_offset(ctx, i)),
			Size:   int64(C.gguf_get_tensor_size(ctx, i)),
		}
		for j := range t.NE {
			t.NE[j] = int64(C.sdt_gguf_ne(gctx, cname, C.int(j)))
		}
		info.Tensors = append(info.Tensors, t)
	}
	return info, nil
}

func readKV(ctx *C.struct_gguf_context, i C.int64_t) formats.KV {
	kv := formats.KV{
		Key:  C.GoString(C.gguf_get_key(ctx, i)),
		Type: formats.ValueType(C.gguf_get_kv_type(ctx, i)),
	}
	switch kv.Type {
	case formats.TypeString:
		kv.Value = C.GoString(C.gguf_get_val_str(ctx, i))
	case formats.TypeArray:
		elem := formats.ValueType(C.gguf_get_arr_type(ctx, i))
		n := int(C.gguf_get_arr_n(ctx, i))
		a := formats.Array{Elem: elem}
		if elem == formats.TypeString {
			vs := make([]string, n)
			for j := range vs {
				vs[j] = C.GoString(C.gguf_get_arr_str(ctx, i, C.size_t(j)))
			}
			a.Values = vs
		} else if sz := scalarSize(elem); sz > 0 {
			var raw []byte
			if n > 0 {
				raw = C.GoBytes(C.gguf_get_arr_data(ctx, i), C.int(n*sz))
			}
			a.Values = decodeSlice(elem, raw, n)
		}
		kv.Value = a
	default:
		if sz := scalarSize(kv.Type); sz > 0 {
			raw := C.GoBytes(C.gguf_get_val_data(ctx, i), C.int(sz))
			kv.Value = decodeScalar(kv.Type, raw)
		}
	}
	return kv
}

func scalarSize(t formats.ValueType) int {
	switch t {
	case formats.TypeUint8, formats.TypeInt8, formats.TypeBool:
		return 1
	case formats.TypeUint16, formats.TypeInt16:
		return 2
	case formats.TypeUint32, formats.TypeInt32, formats.TypeFloat32:
		return 4
	case formats.TypeUint64, formats.TypeInt64, formats.TypeFloat64:
		return 8
	}
	return 0
}

func decodeScalar(t formats.ValueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case formats.TypeUint8:
		return b[0]
	case formats.TypeInt8:
		return int8(b[0])
	case formats.TypeBool:
		return b[0] != 0
	case formats.TypeUint16:
		return le.Uint16(b)
	case formats.TypeInt16:
		return int16(le.Uint16(b))
	case formats.TypeUint32:
		return le.Uint32(b)
	case formats.TypeInt32:
		return int32(le.Uint32(b))
	case formats.TypeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case formats.TypeUint64:
		return le.Uint64(b)
	case formats.TypeInt64:
		return int64(le.Uint64(b))
	case formats.TypeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	return nil
}

// decodeSlice turns n packed little-endian values into the typed slice
// formats.Array documents.
func decodeSlice(t formats.ValueType, raw []byte, n int) any {
	sz := scalarSize(t)
	at := func(i int) any { return decodeScalar(t, raw[i*sz:(i+1)*sz]) }
	switch t {
	case formats.TypeUint8:
		return append([]uint8{}, raw...)
	case formats.TypeInt8:
		return fill[int8](n, at)
	case formats.TypeBool:
		return fill[bool](n, at)
	case formats.TypeUint16:
		return fill[uint16](n, at)
	case formats.TypeInt16:
		return fill[int16](n, at)
	case formats.TypeUint32:
		return fill[uint32](n, at)
	case formats.TypeInt32:
		return fill[int32](n, at)
	case formats.TypeFloat32:
		return fill[float32](n, at)
	case formats.TypeUint64:
		return fill[uint64](n, at)
	case formats.TypeInt64:
		return fill[int64](n, at)
	case formats.TypeFloat64:
		return fill[float64](n, at)
	}
	return nil
}

func fill[T any](n int, at func(int) any) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = at(i).(T)
	}
	return out
}
