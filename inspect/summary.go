package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/comfyquant"
	"github.com/sdtool/sdtool/formats/gguf"
)

// Options selects what a Summary holds.
type Options struct {
	// Filters keep only tensors whose name matches one of them in Tensors
	// (all tensors when empty). Counts and detection always cover the whole file.
	Filters []*regexp.Regexp
	// NoTensors leaves Tensors empty.
	NoTensors bool
}

// Summary describes one model. Its JSON form is documented in
// docs/inspect-json.md; field names are stable.
type Summary struct {
	// Path is the path the model was opened from.
	Path string `json:"path"`
	// Format is "gguf" or "safetensors".
	Format string `json:"format"`
	// Version is the GGUF version (0 for safetensors, and left out of the JSON).
	Version int `json:"version,omitempty"`
	// Alignment is the GGUF data alignment (0 for safetensors, and left out of the JSON).
	Alignment int `json:"alignment,omitempty"`
	// DataOffset is the absolute offset of the first file's data section.
	DataOffset int64 `json:"data_offset"`
	// Files lists the files of the model in shard order.
	Files []string `json:"files"`
	// Warnings lists problems that did not stop reading.
	Warnings []string `json:"warnings"`
	// Metadata holds the metadata entries in file order.
	Metadata []MetaEntry `json:"metadata"`
	// TensorCount is the number of tensors.
	TensorCount int `json:"tensor_count"`
	// ParamCount is the total element count.
	ParamCount int64 `json:"param_count"`
	// TotalBytes is the total tensor data size.
	TotalBytes int64 `json:"total_bytes"`
	// Types counts tensors per type, largest first.
	Types []TypeStat `json:"types"`
	// Architecture is the detected architecture and its components.
	Architecture family.Architecture `json:"architecture"`
	// ComfyQuant lists the ComfyUI quantized modules.
	ComfyQuant []ComfyQuant `json:"comfy_quant"`
	// LongNames counts names that some GGUF readers refuse.
	LongNames LongNames `json:"long_names"`
	// HighRank lists tensors with more than 4 dims, which ggml's GGUF reader refuses.
	HighRank []string `json:"high_rank_tensors"`
	// Filter holds the filter regexps given.
	Filter []string `json:"filter"`
	// Matched is the number of tensors matching the filters.
	Matched int `json:"matched_tensors"`
	// Tensors lists the matching tensors (none with Options.NoTensors).
	Tensors []TensorSummary `json:"tensors"`
	// Adapter describes an adapter file (LoRA and its kin); nil (and left
	// out of the JSON) for a model.
	Adapter *AdapterSummary `json:"adapter,omitempty"`
	// Truncated is set for a file shorter than its header's tensor data
	// says (a cut-short download), which only inspect opens.
	Truncated *Truncation `json:"truncated,omitempty"`
}

// Truncation says how much of a truncated file is missing.
type Truncation struct {
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// Want is the size its header's tensor data needs.
	Want int64 `json:"want"`
	// Missing is Want less Size.
	Missing int64 `json:"missing"`
	// Cut names the tensors whose data is not all in the file, in data order.
	Cut []string `json:"cut_tensors"`
}

// TruncationOf describes e for a Summary.
func TruncationOf(e *formats.TruncatedError) *Truncation {
	return &Truncation{Size: e.Size, Want: e.Want, Missing: e.Missing(), Cut: e.Cut}
}

// MetaEntry is one metadata key and value.
type MetaEntry struct {
	Key string `json:"key"`
	// Type is the value type: u8, i8, u16, i16, u32, i32, f32, bool,
	// string, array, u64, i64, f64.
	Type string `json:"type"`
	// ElemType is the element type of arrays ("" otherwise).
	ElemType string `json:"elem_type,omitempty"`
	// Count is the number of elements of arrays (0 otherwise).
	Count int `json:"count,omitempty"`
	// Value is the value: a number, bool, string, or an array of them.
	// Non-finite floats are the strings "NaN", "+Inf", "-Inf".
	Value any `json:"value"`
}

// TypeStat counts the tensors of one type.
type TypeStat struct {
	// Type is the type's name ("f16", "q4_K").
	Type string `json:"type"`
	// Tensors, Params and Bytes count the tensors of the type, their elements and data size.
	Tensors int   `json:"tensors"`
	Params  int64 `json:"params"`
	Bytes   int64 `json:"bytes"`
	// Percent is Bytes as a percentage of all tensor data, two decimals.
	Percent float64 `json:"percent"`
}

// ComfyQuant is a ComfyUI quantized module: a "<module>.comfy_quant" U8
// tensor holding JSON.
type ComfyQuant struct {
	// Module is the module name (the tensor name without ".comfy_quant").
	Module string `json:"module"`
	// Format is the JSON's "format" field ("int8_tensorwise", "float8_e4m3fn", ...); "" when absent.
	Format string `json:"format"`
	// JSON is the marker's text.
	JSON string `json:"json"`
	// Settings summarises the parsed marker ("int8_tensorwise convrot G=256"); "" when it does not parse.
	Settings string `json:"settings,omitempty"`
	// Error says why the marker could not be read or parsed ("" when fine).
	Error string `json:"error,omitempty"`
}

// LongNames counts tensor names that some GGUF readers refuse.
type LongNames struct {
	// Count is the number of names of gguf.GGMLMaxName (64) bytes or more.
	Count int `json:"count"`
	// OverComfyGGUF counts names longer than 127 bytes.
	OverComfyGGUF int `json:"over_comfyui_gguf"`
	// OverSDCpp counts names longer than 159 bytes.
	OverSDCpp int `json:"over_sdcpp"`
	// Longest is the length in bytes of the longest name.
	Longest int `json:"longest"`
	// Names lists the names of 64 bytes or more.
	Names []string `json:"names"`
}

// TensorSummary is one row of the tensor table.
type TensorSummary struct {
	// Name is the tensor's name.
	Name string `json:"name"`
	// Type is the type's name.
	Type string `json:"type"`
	// Shape is in PyTorch order (outermost first).
	Shape []int64 `json:"shape"`
	// Params is the element count.
	Params int64 `json:"params"`
	// Size is the data size in bytes.
	Size int64 `json:"size"`
	// Offset is the absolute byte offset in File.
	Offset int64 `json:"offset"`
	// File is the file holding the data.
	File string `json:"file"`
}

// Summarize builds the summary of an opened model.
func Summarize(m formats.Model, opts Options) (*Summary, error) {
	info := m.Info()
	tensors := m.Tensors()
	s := &Summary{
		Path:       m.Path(),
		Format:     info.Format,
		Version:    info.Version,
		Alignment:  info.Alignment,
		DataOffset: info.DataOffset,
		Files:      append([]string{}, info.Files...),
		Warnings:   append([]string{}, info.Warnings...),
		Metadata:   []MetaEntry{},
		Types:      []TypeStat{},
		ComfyQuant: []ComfyQuant{},
		Filter:     []string{},
		HighRank:   []string{},
		Tensors:    []TensorSummary{},
	}
	s.LongNames.Names = []string{}
	if !opts.NoTensors && len(opts.Filters) == 0 {
		s.Tensors = make([]TensorSummary, 0, len(tensors))
	}
	for _, kv := range m.Metadata() {
		s.Metadata = append(s.Metadata, metaEntry(kv))
	}
	for _, re := range opts.Filters {
		s.Filter = append(s.Filter, re.String())
	}
	byType := map[formats.DType]*TypeStat{}
	for i := range tensors {
		s.add(m, &tensors[i], byType, opts)
	}
	logical := packedWeights(s, tensors, byType)
	for _, st := range byType {
		if s.TotalBytes > 0 {
			st.Percent = math.Round(float64(st.Bytes)*10000/float64(s.TotalBytes)) / 100
		}
		s.Types = append(s.Types, *st)
	}
	sort.Slice(s.Types, func(i, j int) bool {
		if s.Types[i].Bytes != s.Types[j].Bytes {
			return s.Types[i].Bytes > s.Types[j].Bytes
		}
		return s.Types[i].Type < s.Types[j].Type
	})
	if len(logical) > 0 {
		// Detection and its parameter counts see the weights' [out, in].
		tensors = slices.Clone(tensors)
		for i := range tensors {
			if sh, ok := logical[tensors[i].Name]; ok {
				tensors[i].Shape = sh
			}
		}
	}
	s.Architecture = family.Detect(tensors, m.Metadata())
	s.Adapter = summarizeAdapter(m)
	return s, nil
}

// add counts tensor t of m in the summary: totals, its type's stats,
// names and ranks some readers refuse, ComfyUI markers, and the tensor
// list when the filters keep it.
func (s *Summary) add(m formats.Model, t *formats.Tensor, byType map[formats.DType]*TypeStat, opts Options) {
	n := t.Elements()
	s.TensorCount++
	s.ParamCount += n
	s.TotalBytes += t.Size
	st := byType[t.Type]
	if st == nil {
		st = &TypeStat{Type: t.Type.String()}
		byType[t.Type] = st
	}
	st.Tensors++
	st.Params += n
	st.Bytes += t.Size
	if l := len(t.Name); l >= gguf.GGMLMaxName {
		s.LongNames.Count++
		s.LongNames.Names = append(s.LongNames.Names, t.Name)
		if l > gguf.ComfyGGUFMaxName {
			s.LongNames.OverComfyGGUF++
		}
		if l > gguf.SDCppMaxName {
			s.LongNames.OverSDCpp++
		}
	}
	s.LongNames.Longest = max(s.LongNames.Longest, len(t.Name))
	if len(t.Shape) > gguf.GGMLMaxDims {
		s.HighRank = append(s.HighRank, t.Name)
	}
	if strings.HasSuffix(t.Name, comfyquant.MarkerSuffix) {
		s.ComfyQuant = append(s.ComfyQuant, readComfyQuant(m, t))
	}
	if matchAny(opts.Filters, t.Name) {
		s.Matched++
		if !opts.NoTensors {
			// The shape is the model's, shared: descriptors are
			// read-only, and a copy each adds up on large headers.
			shape := t.Shape[:len(t.Shape):len(t.Shape)]
			if shape == nil {
				shape = []int64{} // JSON [], not null
			}
			s.Tensors = append(s.Tensors, TensorSummary{
				Name: t.Name, Type: t.Type.String(), Shape: shape,
				Params: n, Size: t.Size, Offset: t.Offset, File: t.File,
			})
		}
	}
}

// packedWeights finds the ComfyUI module weights stored two 4-bit values
// per byte ([out, in/2]: nvfp4, convrot_w4a4, asym_w4a8_int8; known from
// the markers already read, so nothing more is read) and counts each as
// out·in parameters, not half: in s's totals and tensor list and in
// byType. It returns their logical [out, in] shapes by weight name.
func packedWeights(s *Summary, tensors []formats.Tensor, byType map[formats.DType]*TypeStat) map[string][]int64 {
	var out map[string][]int64
	for _, q := range s.ComfyQuant {
		if q.Error == "" && comfyquant.Packed(q.Format) {
			if out == nil {
				out = map[string][]int64{}
			}
			out[q.Module+".weight"] = nil
		}
	}
	if out == nil {
		return nil
	}
	for i := range tensors {
		t := &tensors[i]
		if _, ok := out[t.Name]; !ok || len(t.Shape) != 2 {
			continue
		}
		out[t.Name] = []int64{t.Shape[0], 2 * t.Shape[1]}
		s.ParamCount += t.Elements()
		byType[t.Type].Params += t.Elements()
	}
	for i := range s.Tensors {
		if sh := out[s.Tensors[i].Name]; sh != nil {
			s.Tensors[i].Params = sh[0] * sh[1]
		}
	}
	for name, sh := range out {
		if sh == nil {
			delete(out, name) // no 2-D weight of that name: nothing to count
		}
	}
	return out
}

func matchAny(res []*regexp.Regexp, name string) bool {
	if len(res) == 0 {
		return true
	}
	for _, re := range res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// readComfyQuant reads and parses a comfy_quant marker tensor.
func readComfyQuant(m formats.Model, t *formats.Tensor) ComfyQuant {
	q := ComfyQuant{Module: strings.TrimSuffix(t.Name, comfyquant.MarkerSuffix)}
	if t.Type != formats.U8 && t.Type != formats.I8 {
		q.Error = fmt.Sprintf("stored as %s, not U8", t.Type)
		return q
	}
	if t.Size > comfyquant.MaxMarkerSize {
		q.Error = fmt.Sprintf("%d bytes, more than a marker holds", t.Size)
		return q
	}
	data, err := formats.ReadTensor(m, t)
	if err != nil {
		q.Error = err.Error()
		return q
	}
	q.JSON = string(data)
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		q.Error = "invalid JSON: " + err.Error()
		return q
	}
	if f, ok := obj["format"].(string); ok {
		q.Format = f
	}
	// convrot validates what sdtool can decode (group sizes, known formats).
	cfg, err := comfyquant.ParseQuantConfig(data)
	if errors.Is(err, comfyquant.ErrUnsupportedFormat) {
		q.Settings = q.Format + " (sdtool cannot decode this format)"
		return q
	}
	if err != nil {
		q.Error = err.Error()
		return q
	}
	q.Settings = cfg.String()
	return q
}

func metaEntry(kv formats.KV) MetaEntry {
	e := MetaEntry{Key: kv.Key, Type: kv.Type.String(), Value: jsonValue(kv.Value)}
	if a, ok := kv.Value.(formats.Array); ok {
		e.Type = formats.TypeArray.String()
		e.ElemType = a.Elem.String()
		e.Count = a.Len()
	}
	return e
}

// jsonValue turns a metadata value into something every JSON encoder
// writes as a number, string, bool or array: byte slices would otherwise
// become base64 and non-finite floats would fail.
func jsonValue(v any) any {
	switch x := v.(type) {
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return jsonFloat(float64(x))
		}
		return x
	case float64:
		return jsonFloat(x)
	case formats.Array:
		return jsonValue(x.Values)
	case []uint8:
		out := make([]uint16, len(x))
		for i, b := range x {
			out[i] = uint16(b)
		}
		return out
	case []int8:
		out := make([]int16, len(x))
		for i, b := range x {
			out[i] = int16(b)
		}
		return out
	case []float32:
		if finite32(x) {
			return x
		}
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = jsonFloat(float64(f))
		}
		return out
	case []float64:
		if finite64(x) {
			return x
		}
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = jsonFloat(f)
		}
		return out
	case []formats.Array:
		out := make([]any, len(x))
		for i, a := range x {
			out[i] = jsonValue(a)
		}
		return out
	}
	return v
}

func finite32(x []float32) bool {
	for _, f := range x {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return false
		}
	}
	return true
}

func finite64(x []float64) bool {
	for _, f := range x {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
}

func jsonFloat(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return f
}
