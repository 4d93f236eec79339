package pipeline

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/internal/option"
)

// DroppedKey is an input metadata entry that CarryMetadata left out, and why.
type DroppedKey struct {
	// Key is the metadata key.
	Key string
	// Reason says why it is not in the output.
	Reason string
}

// describesData reports keys that describe how an input's tensors are
// stored rather than the model (the writer or the command recomputes
// them), so that no output inherits a stale one.
func describesData(key string) bool {
	switch key {
	case "general.alignment", "general.file_type", "general.quantization_version", comfyquant.SourceMetadata:
		return true
	}
	for _, p := range []string{gguf.OrigShapePrefix, "quantize.imatrix.", "split."} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// CarryMetadata returns the entries of an input's metadata that an output
// in format to ("gguf" or "safetensors") keeps: everything that describes
// the model (names, head counts, an embedded tokenizer, training notes),
// and nothing that describes the input's storage (alignment, file type,
// quantization version, imatrix provenance, ComfyUI-GGUF shapes, split and
// comfy_quant bookkeeping), which the command writes afresh. A safetensors
// output holds strings only: GGUF numbers and booleans become their decimal
// text (what infer's metadata readers accept), and arrays their
// safetensors.ArrayText, which the safetensors reader turns back into the
// array (so an embedded T5 or LLM tokenizer survives); nested arrays are
// dropped. The order of in is kept; dropped entries are
// returned with the reason.
func CarryMetadata(in formats.Metadata, to string) (formats.Metadata, []DroppedKey) {
	var out formats.Metadata
	var dropped []DroppedKey
	for _, kv := range in {
		if describesData(kv.Key) {
			continue
		}
		if to != "safetensors" {
			out = append(out, kv)
			continue
		}
		s, ok := metadataString(kv)
		if a, isArr := kv.Value.(formats.Array); isArr {
			var err error
			if s, err = safetensors.ArrayText(a); err != nil {
				dropped = append(dropped, DroppedKey{kv.Key, fmt.Sprintf("an array value that safetensors' string metadata cannot hold: %v (write a .gguf to keep it)", err)})
				continue
			}
			ok = true
		}
		if !ok {
			dropped = append(dropped, DroppedKey{kv.Key, fmt.Sprintf("a value of type %s has no place in safetensors' string metadata (write a .gguf to keep it)", kv.Type)})
			continue
		}
		out = append(out, formats.KV{Key: kv.Key, Type: formats.TypeString, Value: s})
	}
	return out, dropped
}

// metadataString returns a scalar metadata value as text; false for arrays.
func metadataString(kv formats.KV) (string, bool) {
	switch v := kv.Value.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true
	case uint8, uint16, uint32, uint64, int8, int16, int32, int64:
		return fmt.Sprint(v), true
	}
	return "", false
}

// MergeMetadata joins the carried metadata of several inputs in order: the
// first input that has a key gives its value, and a later input with
// another value for it is reported as dropped.
func MergeMetadata(sources []string, mds []formats.Metadata) (formats.Metadata, []DroppedKey) {
	var out formats.Metadata
	var dropped []DroppedKey
	from := map[string]int{}
	for i, md := range mds {
		for _, kv := range md {
			j, seen := from[kv.Key]
			if !seen {
				from[kv.Key] = i
				out = append(out, kv)
				continue
			}
			if prev, _ := out.Get(kv.Key); fmt.Sprint(prev.Value) != fmt.Sprint(kv.Value) {
				dropped = append(dropped, DroppedKey{kv.Key, fmt.Sprintf("%s has another value; %s's is kept", sources[i], sources[j])})
			}
		}
	}
	return out, dropped
}

// ParseMetadataItems reads --metadata KEY=VALUE items (string values),
// refusing a key given twice and the keys the writers set themselves.
func ParseMetadataItems(items []string) ([][2]string, error) {
	var out [][2]string
	seen := map[string]bool{}
	for _, s := range items {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, option.Errorf("%s %q: want KEY=VALUE", option.Name("Metadata"), s)
		}
		if seen[k] {
			return nil, option.Errorf("%s: key %q given twice", option.Name("Metadata"), k)
		}
		if strings.HasPrefix(k, gguf.OrigShapePrefix) || k == "general.alignment" {
			return nil, option.Errorf("%s: key %q is written by sdtool itself", option.Name("Metadata"), k)
		}
		seen[k] = true
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// SetMetadata returns md with kv in place of the entry of its key, or
// with kv appended when md has none.
func SetMetadata(md formats.Metadata, kv formats.KV) formats.Metadata {
	for i := range md {
		if md[i].Key == kv.Key {
			md[i] = kv
			return md
		}
	}
	return append(md, kv)
}
