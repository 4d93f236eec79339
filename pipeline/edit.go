package pipeline

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// MetaEdit is what `sdtool meta` changes in a model's header; the tensor
// data is copied, never decoded.
type MetaEdit struct {
	// Set holds entries that replace the entry of their key where it is
	// (keeping its place) or are appended.
	Set []formats.KV
	// Delete lists keys to remove; each must exist.
	Delete []string
	// Rename maps tensor names (old, new); a ComfyUI-GGUF orig_shape key of
	// the old name is renamed with it.
	Rename [][2]string
	// Reshape gives tensors (by name before any rename) other stored dims
	// in PyTorch order, with the same element count: [3840] becomes
	// [1, 3840] for a reader that takes the stored dims for the torch shape.
	Reshape map[string][]int64
	// KeepLayout keeps a GGUF's data end unpadded where it was (an edit in
	// place, as gguf_set_metadata.py leaves the file); otherwise the data
	// ends padded to the alignment, as gguf_new_metadata.py writes it.
	KeepLayout bool
}

// EditPlan returns the plan that writes m again to out, as the same
// format, with e applied: every tensor copied in order with its stored
// shape, the metadata edited in place. A GGUF keeps its alignment (from
// general.alignment) and gets the layout of gguf-py's writer, which is
// ggml's, with general.architecture first; with e.KeepLayout the keys
// keep their order and an edit that changes nothing writes the input's
// bytes.
func EditPlan(m formats.Model, out string, e MetaEdit) (*Plan, error) {
	info := m.Info()
	creator, ok := formats.CreatorNamed(info.Format)
	if !ok {
		return nil, fmt.Errorf("%s: %s files cannot be written", m.Path(), info.Format)
	}
	meta, err := editMetadata(m, e)
	if err != nil {
		return nil, err
	}
	if len(info.Files) > 1 && info.Format == "gguf" {
		// The edit of a split GGUF is one file: split.count would make
		// llama.cpp's loader look for shards.
		meta = gguf.StripSplitKeys(meta)
	}
	names, err := renames(m, e.Rename)
	if err != nil {
		return nil, err
	}
	for _, r := range e.Rename {
		old := gguf.OrigShapePrefix + r[0]
		for i := range meta {
			if meta[i].Key == old {
				meta[i].Key = gguf.OrigShapePrefix + r[1]
			}
		}
	}
	plan := &Plan{Path: out, Format: creator, Header: formats.WriteOptions{Metadata: meta, PadEnd: !e.KeepLayout || endsPadded(m)}}
	plan.Use(m)
	for _, t := range m.Tensors() {
		shape := t.Shape
		if s, ok := e.Reshape[t.Name]; ok {
			if n, err := formats.Elements(s); err != nil || n != t.Elements() {
				return nil, fmt.Errorf("%s: tensor %q: shape %v does not hold its %d elements", m.Path(), t.Name, s, t.Elements())
			}
			shape = s
		}
		plan.Outputs = append(plan.Outputs, Output{
			Name: names[t.Name], Type: t.Type, Shape: shape, Producer: Copy(m, t), Source: &t, Note: "copied",
		})
	}
	for name := range e.Reshape {
		if _, ok := names[name]; !ok {
			return nil, fmt.Errorf("%s: tensor %q: no such tensor to reshape", m.Path(), name)
		}
	}
	return plan, nil
}

const archKey = "general.architecture"

// editMetadata applies e's deletions and settings to a copy of m's
// metadata; safetensors metadata must stay strings.
func editMetadata(m formats.Model, e MetaEdit) (formats.Metadata, error) {
	meta := append(formats.Metadata(nil), m.Metadata()...)
	for _, k := range e.Delete {
		i := keyIndex(meta, k)
		if i < 0 {
			return nil, fmt.Errorf("%s: no metadata key %q to delete", m.Path(), k)
		}
		meta = append(meta[:i], meta[i+1:]...)
	}
	for _, kv := range e.Set {
		if m.Info().Format != "gguf" && kv.Type != formats.TypeString {
			return nil, fmt.Errorf("%s: key %q: %s metadata holds strings only, not %s", m.Path(), kv.Key, m.Info().Format, kv.Type)
		}
		meta = SetMetadata(meta, kv)
	}
	// gguf-py's writer (gguf_new_metadata.py, ComfyUI-GGUF's convert.py)
	// writes general.architecture first.
	if i := keyIndex(meta, archKey); i > 0 && !e.KeepLayout && m.Info().Format == "gguf" {
		arch := meta[i]
		copy(meta[1:i+1], meta[:i])
		meta[0] = arch
	}
	return meta, nil
}

func keyIndex(meta formats.Metadata, key string) int {
	for i := range meta {
		if meta[i].Key == key {
			return i
		}
	}
	return -1
}

// renames returns every tensor's output name with the renames applied,
// refusing a rename of a missing tensor or onto an existing name.
func renames(m formats.Model, rs [][2]string) (map[string]string, error) {
	names := make(map[string]string, len(m.Tensors()))
	for _, t := range m.Tensors() {
		names[t.Name] = t.Name
	}
	taken := make(map[string]bool, len(names))
	for n := range names {
		taken[n] = true
	}
	for _, r := range rs {
		if _, ok := names[r[0]]; !ok {
			return nil, fmt.Errorf("%s: tensor %q: no such tensor to rename", m.Path(), r[0])
		}
		if r[1] == "" || taken[r[1]] && r[1] != r[0] {
			return nil, fmt.Errorf("%s: tensor %q: cannot rename it to %q, which is empty or taken", m.Path(), r[0], r[1])
		}
		delete(taken, names[r[0]])
		names[r[0]], taken[r[1]] = r[1], true
	}
	return names, nil
}

// endsPadded reports whether a GGUF's data ends padded to its alignment
// (ggml's and gguf-py's writers pad it; sd-cli does not).
func endsPadded(m formats.Model) bool {
	f, ok := m.(*gguf.File)
	if !ok || len(f.Tensors()) == 0 {
		return false
	}
	last := f.Tensors()[len(f.Tensors())-1]
	end := last.Offset + last.Size
	align := int64(f.Info().Alignment)
	return f.Size() == (end+align-1)/align*align
}

// ParseValue reads s as a metadata value of type t (u8 ... f64, bool,
// string); arrays are not written from the command line.
func ParseValue(t formats.ValueType, s string) (any, error) {
	bad := func(err error) error { return fmt.Errorf("%q is not a %s: %v", s, t, err) }
	switch t {
	case formats.TypeString:
		return s, nil
	case formats.TypeBool:
		v, err := strconv.ParseBool(s)
		if err != nil {
			return nil, bad(err)
		}
		return v, nil
	case formats.TypeFloat32, formats.TypeFloat64:
		bits := 64
		if t == formats.TypeFloat32 {
			bits = 32
		}
		v, err := strconv.ParseFloat(s, bits)
		if err != nil {
			return nil, bad(err)
		}
		if t == formats.TypeFloat32 {
			return float32(v), nil
		}
		return v, nil
	}
	return parseInt(t, s)
}

// parseInt reads s as an integer of type t.
func parseInt(t formats.ValueType, s string) (any, error) {
	sizes := map[formats.ValueType]int{
		formats.TypeUint8: 8, formats.TypeInt8: 8, formats.TypeUint16: 16, formats.TypeInt16: 16,
		formats.TypeUint32: 32, formats.TypeInt32: 32, formats.TypeUint64: 64, formats.TypeInt64: 64,
	}
	bits, ok := sizes[t]
	if !ok {
		return nil, fmt.Errorf("values of type %s cannot be given on the command line", t)
	}
	signed := t == formats.TypeInt8 || t == formats.TypeInt16 || t == formats.TypeInt32 || t == formats.TypeInt64
	if signed {
		v, err := strconv.ParseInt(s, 0, bits)
		if err != nil {
			return nil, fmt.Errorf("%q is not a %s: %v", s, t, numCause(err))
		}
		switch t {
		case formats.TypeInt8:
			return int8(v), nil
		case formats.TypeInt16:
			return int16(v), nil
		case formats.TypeInt32:
			return int32(v), nil
		}
		return v, nil
	}
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return nil, fmt.Errorf("%q is not a %s: %v", s, t, numCause(err))
	}
	switch t {
	case formats.TypeUint8:
		return uint8(v), nil
	case formats.TypeUint16:
		return uint16(v), nil
	case formats.TypeUint32:
		return uint32(v), nil
	}
	return v, nil
}

// numCause shortens strconv's errors to their cause ("value out of range").
func numCause(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return ne.Err
	}
	return err
}

// ParseValueType reads a value type name as inspect prints it (u8, i8,
// u16, i16, u32, i32, u64, i64, f32, f64, bool, string).
func ParseValueType(s string) (formats.ValueType, error) {
	for t := formats.TypeUint8; t <= formats.TypeFloat64; t++ {
		if t != formats.TypeArray && strings.EqualFold(t.String(), s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("type %q: want u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool or string", s)
}
