package quant

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sdtool/sdtool/formats"
)

// Codec encodes and decodes rows of one tensor type. A row holds a whole
// number of blocks of the type.
type Codec struct {
	// Type is the tensor type.
	Type formats.DType
	// Quantize encodes src into dst (exactly RowBytes(len(src)) bytes).
	// weights is nil for ggml's unweighted (reference) path, or one
	// importance value per element of src for the weighted path. It must
	// not allocate and must be safe for concurrent use.
	Quantize func(dst []byte, src []float32, weights []float32)
	// Dequantize decodes src (a whole number of blocks) into dst.
	Dequantize func(dst []float32, src []byte)
	// UsesWeights reports whether weights change the output (false for q8_0, mxfp4, ...).
	UsesWeights bool
	// NeedsWeights reports a type that ggml refuses to quantize without an importance matrix.
	NeedsWeights bool
	// Experimental marks a codec whose bytes are not checked against ggml.
	Experimental bool
	// Native marks a codec provided by the linked ggml through cgo.
	Native bool

	// elementwise marks a codec that encodes element by element, without
	// weights, so that QuantizeRows may hand it many rows in one call.
	elementwise bool
}

var (
	// mu serializes Register; codecs is replaced, never modified, so that
	// Lookup (once per QuantizeRows call) reads it without a lock.
	mu     sync.Mutex
	codecs atomic.Pointer[map[formats.DType]Codec]
)

// registry is the current codec map (nil, which reads as empty, before
// the first Register).
func registry() map[formats.DType]Codec {
	if m := codecs.Load(); m != nil {
		return *m
	}
	return nil
}

// Register adds or replaces the codec of c.Type. Quantize or Dequantize may
// be nil when the type cannot be encoded or decoded. A Go codec is never
// replaced by a native one for the same direction.
func Register(c Codec) {
	mu.Lock()
	defer mu.Unlock()
	cur := registry()
	old, ok := cur[c.Type]
	if ok && c.Native {
		if old.Quantize != nil && !old.Native {
			c.Quantize, c.UsesWeights, c.NeedsWeights = old.Quantize, old.UsesWeights, old.NeedsWeights
			c.Native = old.Native
		}
		if old.Dequantize != nil {
			c.Dequantize = old.Dequantize
		}
	}
	c.elementwise = c.Type.Info().BlockSize == 1 && !c.UsesWeights
	next := make(map[formats.DType]Codec, len(cur)+1)
	for t, v := range cur {
		next[t] = v
	}
	next[c.Type] = c
	codecs.Store(&next)
}

// Lookup returns the codec of t.
func Lookup(t formats.DType) (Codec, bool) {
	c, ok := registry()[t]
	return c, ok
}

// CanQuantize reports whether rows of type t can be encoded in this binary.
func CanQuantize(t formats.DType) bool {
	c, ok := Lookup(t)
	return ok && c.Quantize != nil
}

// CanDequantize reports whether rows of type t can be decoded to floats.
func CanDequantize(t formats.DType) bool {
	c, ok := Lookup(t)
	return ok && c.Dequantize != nil
}

// Registered lists the types that have a codec, in id order.
func Registered() []formats.DType {
	cur := registry()
	out := make([]formats.DType, 0, len(cur))
	for t := range cur {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ErrNoCodec is wrapped by errors about types that cannot be encoded or decoded.
var ErrNoCodec = fmt.Errorf("no codec")

// Encoder returns the quantizer of t or an error that says why there is none.
func Encoder(t formats.DType) (Codec, error) {
	c, ok := Lookup(t)
	if !ok || c.Quantize == nil {
		switch t {
		case formats.IQ1_S, formats.IQ1_M, formats.IQ2_XXS, formats.IQ2_XS, formats.IQ2_S, formats.IQ3_XXS, formats.IQ3_S:
			// Only ggml quantizes the grid types; the native/codecs package registers them in a cgo build.
			return Codec{}, fmt.Errorf("quantizing to %s needs ggml: this binary was built without cgo (%w)", t, ErrNoCodec)
		}
		return Codec{}, fmt.Errorf("cannot quantize to %s (%w)", t, ErrNoCodec)
	}
	return c, nil
}

// Decoder returns the dequantizer of t or an error that says why there is none.
func Decoder(t formats.DType) (Codec, error) {
	c, ok := Lookup(t)
	if !ok || c.Dequantize == nil {
		return Codec{}, fmt.Errorf("cannot decode %s to floats (%w)", t, ErrNoCodec)
	}
	return c, nil
}
