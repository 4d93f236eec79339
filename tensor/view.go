package tensor

import (
	"fmt"
	"strings"
	"sync"

	"github.com/sdtool/sdtool/convrot"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/quant"
)

// Source is one logical tensor of a model, readable as float32 values.
type Source struct {
	// Name is the tensor's name (a module's weight name for ComfyUI modules).
	Name string
	// Tensor is the stored tensor (for a module, its I8 or F8 weight).
	Tensor formats.Tensor
	// Module is the ComfyUI quantized module the weight belongs to, nil for
	// plain tensors.
	Module *comfyquant.Module
	// OrigShape is the torch shape a GGUF records for the tensor in
	// comfy.gguf.orig_shape.<name> (ComfyUI-GGUF's reshaped conv kernels,
	// folded 5-D tensors), nil when there is none or it does not hold the
	// same number of elements.
	OrigShape []int64

	m         formats.Model
	dec       *moduleDecoder // modules
	codec     quant.Codec    // plain tensors
	unit      int64          // elements decoded together (block size, or a module row)
	unitBytes int64
	comp      Computed // the model computes the values (nil: decode the stored bytes)
	err       error    // why the tensor cannot be decoded, reported by Read
}

// Computed is a model that computes some of its tensors rather than
// storing them (a base model with adapters baked in, see package lora).
// ReadTensorAt gives a computed tensor's values encoded to its listed type;
// a Source of it reads the float32 values from ReadFloat32 instead, so that
// a reader converting them to another type rounds them once, not twice.
type Computed interface {
	formats.Model
	// Computes reports whether t is computed.
	Computes(t *formats.Tensor) bool
	// ReadFloat32 reads elements [first, first+len(dst)) of a computed
	// tensor, in storage (row-major) order; it is safe to call concurrently.
	ReadFloat32(t *formats.Tensor, dst []float32, first int64) error
}

// View is a model's tensors as Sources, with the auxiliary tensors of
// quantized modules (scales, markers) left out.
type View struct {
	// Sources lists the tensors in file order.
	Sources []*Source
	// Aux lists the names of the module tensors that are not Sources
	// (weight_scale, comfy_quant, input_scale, scaled_fp8).
	Aux []string
	// Modules lists the ComfyUI quantized modules found (Unsupported ones included).
	Modules []comfyquant.Module

	byName     map[string]*Source // built by the first Lookup
	byNameOnce sync.Once
}

// NewView lists m's tensors as Sources. ComfyUI quantized modules are found
// with comfyquant.Detect: their weight becomes one Source decoded through
// the module's scales, and their other tensors are listed in Aux. A module
// in a format convrot cannot decode, or a tensor type with no
// dequantizer, gives a Source whose Read fails with the reason.
func NewView(m formats.Model) (*View, error) {
	x, err := NewIndex(m)
	if err != nil {
		return nil, err
	}
	out := &View{Modules: x.Modules, Aux: x.Aux, Sources: make([]*Source, 0, len(x.pos))}
	// One array holds every Source: one allocation, not one per tensor.
	backing := make([]Source, len(x.pos))
	for k := range x.pos {
		x.fill(&backing[k], k)
		out.Sources = append(out.Sources, &backing[k])
	}
	return out, nil
}

// Index lists a model's tensors as NewView does but builds each Source
// only when asked, so that a caller visiting every tensor once (diff)
// holds four bytes a tensor rather than a Source (over 200 bytes) of
// each: on a header of 500k tensors, the difference is 100 MB a model.
type Index struct {
	// Aux and Modules are as in View.
	Aux     []string
	Modules []comfyquant.Module

	m           formats.Model
	tensors     []formats.Tensor
	pos         []int32 // positions in tensors of the Sources, in file order
	modByWeight map[string]*comfyquant.Module
	orig        map[string]formats.Array
}

// NewIndex finds m's Sources, modules and auxiliary tensors as NewView
// does, without building the Sources.
func NewIndex(m formats.Model) (*Index, error) {
	mods, err := comfyquant.Detect(m)
	if err != nil {
		return nil, err
	}
	x := &Index{Modules: mods, m: m, tensors: m.Tensors(), orig: origShapes(m.Metadata())}
	aux := map[string]bool{}
	x.modByWeight = map[string]*comfyquant.Module{}
	for i := range mods {
		mod := &mods[i]
		for _, a := range mod.Aux() {
			aux[a] = true
		}
		if mod.Source == comfyquant.SourceScaledFP8 {
			aux["scaled_fp8"] = true
		}
		if mod.Weight.Name != "" {
			x.modByWeight[mod.Weight.Name] = mod
		} else if mod.Unsupported {
			x.modByWeight[mod.Name+".weight"] = mod
		}
	}
	x.pos = make([]int32, 0, len(x.tensors))
	for i := range x.tensors {
		if name := x.tensors[i].Name; len(aux) > 0 && aux[name] {
			x.Aux = append(x.Aux, name)
			continue
		}
		x.pos = append(x.pos, int32(i))
	}
	return x, nil
}

// Len returns the number of Sources.
func (x *Index) Len() int { return len(x.pos) }

// Name returns the name of Source k.
func (x *Index) Name(k int) string { return x.tensors[x.pos[k]].Name }

// Tensor returns the stored tensor of Source k (a module's weight), which
// must not be modified.
func (x *Index) Tensor(k int) *formats.Tensor { return &x.tensors[x.pos[k]] }

// Source builds Source k, the same as NewView's Sources[k].
func (x *Index) Source(k int) *Source {
	s := new(Source)
	x.fill(s, k)
	return s
}

// Fill makes *s Source k, as Source does, so that a caller visiting many
// tensors can reuse one Source rather than allocate one for each.
func (x *Index) Fill(k int, s *Source) { x.fill(s, k) }

// fill makes s Source k.
func (x *Index) fill(s *Source, k int) {
	t := x.tensors[x.pos[k]]
	mod, ok := x.modByWeight[t.Name]
	if !ok {
		plain(s, x.m, t)
		s.OrigShape = origShape(x.orig, t)
		return
	}
	*s = Source{Name: t.Name, Tensor: t, m: x.m, OrigShape: origShape(x.orig, t), Module: mod}
	s.unit, s.unitBytes = 1, 1
	if len(t.Shape) == 2 {
		// A packed 4-bit module stores [out, in/2] bytes: the Source has
		// the logical [out, in] shape, a unit of one logical row.
		if !mod.Unsupported {
			s.Tensor.Shape = mod.Shape()
		}
		s.unit, s.unitBytes = s.Tensor.Shape[1], t.Shape[1]
	}
	var err error
	if s.dec, err = newModuleDecoder(x.m, *mod); err != nil {
		s.err = err
	}
}

// Plain returns a Source that reads t as stored, with its type's codec: no
// ComfyUI module is looked for and no recorded shape applied. A type with
// no dequantizer gives a Source whose Read fails with the reason. A tensor
// that m computes (Computed) is read as m computes it.
func Plain(m formats.Model, t formats.Tensor) *Source {
	s := new(Source)
	plain(s, m, t)
	return s
}

// plain fills s as Plain's Source of t.
func plain(s *Source, m formats.Model, t formats.Tensor) {
	*s = Source{Name: t.Name, Tensor: t, m: m}
	// &s.Tensor, not &t: a pointer to the parameter would move every
	// tensor's descriptor to the heap.
	if c, ok := m.(Computed); ok && c.Computes(&s.Tensor) {
		s.comp = c
	}
	info := t.Type.Info()
	s.unit, s.unitBytes = int64(max(info.BlockSize, 1)), int64(info.BlockBytes)
	var err error
	if s.codec, err = quant.Decoder(t.Type); err != nil {
		s.err = fmt.Errorf("%s: tensor %q: %w", t.File, t.Name, err)
	} else if t.Type == formats.F6_E2M3 || t.Type == formats.F6_E3M2 {
		s.err = fmt.Errorf("%s: tensor %q: the bit packing of %s is not defined", t.File, t.Name, t.Type)
	}
}

// Lookup returns the Source of a tensor name.
// The index is built on the first call (safe for concurrent calls), so a
// view that is never searched by name costs no map.
func (d *View) Lookup(name string) (*Source, bool) {
	d.byNameOnce.Do(func() {
		d.byName = make(map[string]*Source, len(d.Sources))
		for _, s := range d.Sources {
			d.byName[s.Name] = s
		}
	})
	s, ok := d.byName[name]
	return s, ok
}

// Elements returns the number of elements of the tensor.
func (s *Source) Elements() int64 { return s.Tensor.Elements() }

// Shape returns the tensor's logical shape in PyTorch order: OrigShape
// when the file records one, else the stored shape. The elements are in
// the same order either way.
func (s *Source) Shape() []int64 {
	if s.OrigShape != nil {
		return s.OrigShape
	}
	return s.Tensor.Shape
}

// origShapes indexes the comfy.gguf.orig_shape entries of meta by tensor
// name (the first of a repeated key, as Metadata.Get finds it): one pass,
// rather than a search of all metadata for every tensor.
func origShapes(meta formats.Metadata) map[string]formats.Array {
	var out map[string]formats.Array
	for _, kv := range meta {
		name, ok := strings.CutPrefix(kv.Key, gguf.OrigShapePrefix)
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]formats.Array{}
		}
		if _, dup := out[name]; dup {
			continue
		}
		a, _ := kv.Value.(formats.Array) // not an array: no shape, as before
		out[name] = a
	}
	return out
}

// origShape reads t's comfy.gguf.orig_shape entry from origShapes' index.
func origShape(orig map[string]formats.Array, t formats.Tensor) []int64 {
	a, ok := orig[t.Name]
	if !ok {
		return nil
	}
	v, ok := a.Values.([]int32)
	if !ok {
		return nil
	}
	out := make([]int64, len(v))
	for i, d := range v {
		out[i] = int64(d)
	}
	if n, err := formats.Elements(out); err != nil || n != t.Elements() {
		return nil
	}
	return out
}

// TypeName names the stored type: the ggml or safetensors type name, or
// the module's format ("int8_convrot", "int8", "fp8_e4m3", "fp8_e5m2").
func (s *Source) TypeName() string {
	if s.Module == nil {
		return s.Tensor.Type.String()
	}
	return convrot.TypeName(s.Module.Config)
}

// Quantized reports a lossy stored form: a ggml block type or a ComfyUI module.
func (s *Source) Quantized() bool { return s.Module != nil || s.Tensor.Type.Quantized() }

// Float reports whether the stored values are floating point (plain float
// dtypes, block types, modules), as opposed to integers and booleans.
func (s *Source) Float() bool {
	return s.Module != nil || s.Tensor.Type.Info().Float || s.Tensor.Type.Quantized()
}

// Err returns why the tensor cannot be decoded, nil when it can.
func (s *Source) Err() error { return s.err }

// RawBytes returns the bytes of stored data that Read needs for n elements
// starting anywhere: at most two partial units more than n elements take.
func (s *Source) RawBytes(n int64) int64 {
	units := (n+s.unit-1)/s.unit + 1
	return units * s.unitBytes
}

// Read decodes elements [first, first+len(dst)) of the tensor, in storage
// (row-major) order, into dst. Ranges need not fall on block or row
// boundaries: the covering blocks are decoded into a scratch buffer and the
// range copied out. The reader's buffers are scratch's own, apart from the
// numbered ones, so dst may be one of those; it is safe to call
// concurrently with different scratches.
func (s *Source) Read(dst []float32, first int64, scratch *Scratch) error {
	if s.err != nil {
		return s.err
	}
	n := int64(len(dst))
	total := s.Elements()
	if first < 0 || first+n > total {
		return fmt.Errorf("%s: tensor %q: elements [%d, %d) out of range (%d elements)", s.Tensor.File, s.Name, first, first+n, total)
	}
	if n == 0 {
		return nil
	}
	if s.comp != nil {
		return s.comp.ReadFloat32(&s.Tensor, dst, first)
	}
	u0 := first / s.unit
	u1 := (first + n + s.unit - 1) / s.unit
	scratch.raw = grow(scratch.raw, int((u1-u0)*s.unitBytes))
	raw := scratch.raw
	if err := formats.ReadFull(s.m, &s.Tensor, raw, u0*s.unitBytes); err != nil {
		return err
	}
	out := dst
	aligned := u0*s.unit == first && u1*s.unit == first+n
	if !aligned {
		scratch.wide = grow(scratch.wide, int((u1-u0)*s.unit))
		out = scratch.wide
	}
	if s.dec != nil {
		if err := s.dec.decode(out, u0, raw); err != nil {
			return fmt.Errorf("%s: %w", s.Tensor.File, err)
		}
	} else if err := quant.DequantizeRows(s.Tensor.Type, out, raw, 1); err != nil {
		return fmt.Errorf("%s: tensor %q: %w", s.Tensor.File, s.Name, err)
	}
	if !aligned {
		copy(dst, out[first-u0*s.unit:])
	}
	return nil
}
