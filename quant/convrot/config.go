package convrot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The comfy_quant formats this package reads and writes.
const (
	// FormatInt8 is INT8 weights with an F32 scale per row ([out, 1]) or per
	// tensor (a scalar); with convrot the rows are Hadamard-rotated.
	FormatInt8 = "int8_tensorwise"
	// FormatFP8E4M3 is float8_e4m3fn weights with a tensor-wise F32 scale.
	FormatFP8E4M3 = "float8_e4m3fn"
	// FormatFP8E5M2 is float8_e5m2 weights with a tensor-wise F32 scale.
	FormatFP8E5M2 = "float8_e5m2"
)

// MarkerSuffix ends the name of the U8 tensor that holds a module's
// comfy_quant JSON (the module prefix has no ".weight").
const MarkerSuffix = ".comfy_quant"

// MaxMarkerSize bounds the bytes of a comfy_quant marker sdtool will read;
// real markers are under 200 bytes.
const MaxMarkerSize = 64 << 10

// ErrConfig is wrapped by every error about a malformed comfy_quant marker.
var ErrConfig = errors.New("invalid comfy_quant marker")

// ErrUnsupportedFormat is wrapped when a well-formed marker names a format
// this package cannot decode (nvfp4, mxfp8, convrot_w4a4, ...), so a caller
// can choose to copy such a module unchanged.
var ErrUnsupportedFormat = errors.New("unsupported comfy_quant format")

// QuantConfig is the content of a comfy_quant marker.
type QuantConfig struct {
	// Format is FormatInt8, FormatFP8E4M3 or FormatFP8E5M2.
	Format string
	// Convrot reports INT8 weights rotated by H_GroupSize.
	Convrot bool
	// GroupSize is the rotation group size when Convrot is set, else 0.
	GroupSize int
	// FullPrecisionMatMul is ComfyUI's "full_precision_matrix_mult": the
	// loader dequantizes before the product instead of using INT8/FP8 kernels.
	FullPrecisionMatMul bool
	// Unknown lists, sorted, the keys the parser did not interpret
	// (convert_to_quant's "per_row", future options). Marshal drops them.
	Unknown []string
}

// String describes c for listings: "int8_tensorwise convrot G=256",
// "float8_e4m3fn full_precision_matrix_mult".
func (c QuantConfig) String() string {
	s := c.Format
	if c.Convrot {
		s += " convrot G=" + strconv.Itoa(c.GroupSize)
	}
	if c.FullPrecisionMatMul {
		s += " full_precision_matrix_mult"
	}
	return s
}

// MarshalQuantConfig returns the marker bytes of c, formatted the way
// Python's json.dumps writes them with its default separators (", " and
// ": "), which is what ComfyUI and convert_to_quant store: keys in the order
// format, convrot, convrot_groupsize, full_precision_matrix_mult, the last
// three only when set. For example
//
//	{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}
//	{"format": "int8_tensorwise"}
//	{"format": "float8_e4m3fn"}
func MarshalQuantConfig(c QuantConfig) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"format": "`)
	b.WriteString(c.Format)
	b.WriteByte('"')
	if c.Convrot {
		b.WriteString(`, "convrot": true, "convrot_groupsize": `)
		b.WriteString(strconv.Itoa(c.GroupSize))
	}
	if c.FullPrecisionMatMul {
		b.WriteString(`, "full_precision_matrix_mult": true`)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// knownFormats are the formats this package decodes.
var knownFormats = map[string]struct{}{FormatInt8: {}, FormatFP8E4M3: {}, FormatFP8E5M2: {}}

// validate checks the combination of fields.
func (c QuantConfig) validate() error {
	if _, ok := knownFormats[c.Format]; !ok {
		return fmt.Errorf("%w %q", ErrUnsupportedFormat, c.Format)
	}
	if c.Convrot {
		if c.Format != FormatInt8 {
			return fmt.Errorf("%w: convrot needs format %q, not %q", ErrConfig, FormatInt8, c.Format)
		}
		if err := CheckGroupSize(c.GroupSize); err != nil {
			return fmt.Errorf("%w: convrot_groupsize: %w", ErrConfig, err)
		}
	} else if c.GroupSize != 0 {
		return fmt.Errorf("%w: group size %d without convrot", ErrConfig, c.GroupSize)
	}
	return nil
}

// ParseQuantConfig decodes and checks a comfy_quant marker. It accepts what
// ComfyUI accepts, with stricter types so that a damaged marker is reported
// rather than guessed at:
//
//   - the data is one UTF-8 JSON object (at most MaxMarkerSize bytes);
//   - "format" is a string; formats other than FormatInt8, FormatFP8E4M3 and
//     FormatFP8E5M2 give an error wrapping ErrUnsupportedFormat together
//     with a config that holds only Format, so that a listing can name it;
//   - "convrot" and "full_precision_matrix_mult" are booleans;
//   - "convrot_groupsize" is an integer literal (256, not 256.0 or "256"),
//     defaults to 256 when convrot is true, must then be a power of four, and
//     is ignored when convrot is false (as ComfyUI ignores it);
//   - "convrot", "convrot_groupsize" and "full_precision_matrix_mult" may
//     instead sit in a nested "params" object (older convert_to_quant
//     output); a top-level key wins over a nested one;
//   - other keys are tolerated and listed in Unknown, because ComfyUI
//     ignores them and producers add new ones ("per_row").
//
// A repeated key takes its last value, as Python's json.loads does.
func ParseQuantConfig(data []byte) (QuantConfig, error) {
	if len(data) > MaxMarkerSize {
		return QuantConfig{}, fmt.Errorf("%w: %d bytes, more than %d", ErrConfig, len(data), MaxMarkerSize)
	}
	if !utf8.Valid(data) {
		return QuantConfig{}, fmt.Errorf("%w: not UTF-8", ErrConfig)
	}
	top, err := decodeObject(data)
	if err != nil {
		return QuantConfig{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var params map[string]json.RawMessage
	if raw, ok := top["params"]; ok {
		if params, err = decodeObject(raw); err != nil {
			return QuantConfig{}, fmt.Errorf("%w: \"params\": %v", ErrConfig, err)
		}
	}
	// lookup finds a key at the top level, then in "params".
	lookup := func(key string) (json.RawMessage, bool) {
		if v, ok := top[key]; ok {
			return v, true
		}
		v, ok := params[key]
		return v, ok
	}
	known := map[string]bool{"format": true, "convrot": true, "convrot_groupsize": true,
		"full_precision_matrix_mult": true, "params": true}

	var c QuantConfig
	raw, ok := top["format"]
	if !ok {
		return QuantConfig{}, fmt.Errorf("%w: no \"format\" key", ErrConfig)
	}
	if err := json.Unmarshal(raw, &c.Format); err != nil {
		return QuantConfig{}, fmt.Errorf("%w: \"format\" is %s, not a string", ErrConfig, short(raw))
	}
	if _, ok := knownFormats[c.Format]; !ok {
		// Other formats give other meanings to the remaining keys.
		return QuantConfig{Format: c.Format}, fmt.Errorf("%w %q", ErrUnsupportedFormat, c.Format)
	}
	if c.Convrot, err = boolKey(lookup, "convrot"); err != nil {
		return QuantConfig{}, err
	}
	if c.FullPrecisionMatMul, err = boolKey(lookup, "full_precision_matrix_mult"); err != nil {
		return QuantConfig{}, err
	}
	if c.Convrot {
		c.GroupSize = DefaultGroupSize
		if raw, ok := lookup("convrot_groupsize"); ok {
			if c.GroupSize, err = intValue(raw); err != nil {
				return QuantConfig{}, fmt.Errorf("%w: \"convrot_groupsize\": %v", ErrConfig, err)
			}
		}
	}
	for k := range top {
		if !known[k] {
			c.Unknown = append(c.Unknown, k)
		}
	}
	for k := range params {
		if !known[k] {
			c.Unknown = append(c.Unknown, "params."+k)
		}
	}
	sort.Strings(c.Unknown)
	if err := c.validate(); err != nil {
		return QuantConfig{}, err
	}
	return c, nil
}

// decodeObject decodes one JSON object into its raw members and refuses
// anything after it.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object: %s", short(data))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the JSON object")
	}
	return m, nil
}

// boolKey reads an optional boolean key.
func boolKey(lookup func(string) (json.RawMessage, bool), key string) (bool, error) {
	raw, ok := lookup(key)
	if !ok {
		return false, nil
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false", "null":
		return false, nil
	}
	return false, fmt.Errorf("%w: %q is %s, not true or false", ErrConfig, key, short(raw))
}

// intValue reads a JSON integer literal that fits in an int.
func intValue(raw json.RawMessage) (int, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || strings.ContainsAny(s, ".eE\"") || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
		return 0, fmt.Errorf("%s is not an integer", short(raw))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || int64(int(v)) != v {
		return 0, fmt.Errorf("%s is not an integer in range", short(raw))
	}
	return int(v), nil
}

// short quotes at most 40 bytes of raw JSON for an error message.
func short(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}
