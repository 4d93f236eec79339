package diffusers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/ckpt"
	"github.com/sdtool/sdtool/formats/safetensors"
)

// Model is an opened diffusers folder: the components' tensors under their
// prefixed names, read through the component models.
type Model struct {
	path   string
	info   formats.Info
	parts  []formats.Model
	list   []formats.Tensor
	source map[string]source // prefixed name -> component tensor
	meta   formats.Metadata
}

type source struct {
	part   formats.Model
	tensor formats.Tensor // as the component model lists it
}

var _ formats.Model = (*Model)(nil)

// IsFolder reports whether dir is a directory with a model_index.json or
// a UNet weight file under unet/.
func IsFolder(dir string) bool {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false
	}
	if isFile(filepath.Join(dir, IndexFile)) {
		return true
	}
	files := weightFiles(dir, Components[0])
	return len(files) > 0
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// weightFiles returns the candidates for a component that exist, best
// first: NAME.safetensors, its sharded index, the fp16 variant of both,
// then the .bin forms (PyTorch checkpoints).
func weightFiles(dir string, c Component) []string {
	bin := c.Stem
	if s, ok := binStem[c.Stem]; ok {
		bin = s
	}
	var cands []string
	for _, variant := range []string{"", ".fp16"} {
		cands = append(cands, c.Stem+variant+".safetensors", c.Stem+variant+".safetensors.index.json")
	}
	for _, variant := range []string{"", ".fp16"} {
		cands = append(cands, bin+variant+".bin", bin+variant+".bin.index.json")
	}
	var found []string
	for _, name := range cands {
		p := filepath.Join(dir, c.Dir, name)
		if isFile(p) {
			found = append(found, p)
		}
	}
	return found
}

// Open opens the diffusers folder dir: every component in Components whose
// weights exist (the UNet must), each renamed with its prefix. A name that
// already starts with the prefix is kept as it is, as in stable-diffusion.cpp.
func Open(dir string) (*Model, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, formatError(dir, "", "not a directory")
	}
	m := &Model{path: dir, info: formats.Info{Format: "diffusers"}, source: map[string]source{}}
	if err := m.readIndex(); err != nil {
		return nil, err
	}
	for _, c := range Components {
		files := weightFiles(dir, c)
		if len(files) == 0 {
			if c.Required {
				m.Close()
				return nil, formatError(dir, "", fmt.Sprintf("%s is missing (an SD/SDXL diffusers folder needs its UNet; transformer-based layouts such as SD3 and Flux are not supported)",
					filepath.Join(c.Dir, c.Stem+".safetensors")))
			}
			if !c.Optional {
				m.info.Warnings = append(m.info.Warnings, fmt.Sprintf("%s: no %s weights (%s)", dir, c.Dir, filepath.Join(c.Dir, c.Stem+".safetensors")))
			}
			continue
		}
		part, err := openPart(files[0])
		if err != nil {
			m.Close()
			return nil, err
		}
		m.parts = append(m.parts, part)
		if err := m.add(c, part); err != nil {
			m.Close()
			return nil, err
		}
		if len(files) > 1 {
			m.info.Warnings = append(m.info.Warnings, fmt.Sprintf("%s: using %s; also present: %s", dir, rel(dir, files[0]), strings.Join(relAll(dir, files[1:]), ", ")))
		}
	}
	for _, extra := range []string{"text_encoder_3", "transformer", "prior"} {
		if st, err := os.Stat(filepath.Join(dir, extra)); err == nil && st.IsDir() {
			m.info.Warnings = append(m.info.Warnings, fmt.Sprintf("%s: %s/ is not read (only the SD/SDXL components are)", dir, extra))
		}
	}
	return m, nil
}

func rel(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return r
	}
	return p
}

func relAll(dir string, ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = rel(dir, p)
	}
	return out
}

// readIndex records model_index.json's pipeline class and diffusers version
// as metadata (diffusers.class_name, diffusers.version).
func (m *Model) readIndex() error {
	p := filepath.Join(m.path, IndexFile)
	f, _, err := formats.OpenRegular(p, math.MaxInt64) // bounded below with its own message
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if len(b) > maxIndexSize {
		return formatError(p, "", fmt.Sprintf("larger than %d bytes", maxIndexSize))
	}
	var idx struct {
		Class   string `json:"_class_name"`
		Version string `json:"_diffusers_version"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return formatError(p, "", err.Error())
	}
	if idx.Class != "" {
		m.meta = append(m.meta, formats.KV{Key: "diffusers.class_name", Type: formats.TypeString, Value: idx.Class})
	}
	if idx.Version != "" {
		m.meta = append(m.meta, formats.KV{Key: "diffusers.version", Type: formats.TypeString, Value: idx.Version})
	}
	return nil
}

// openPart opens one component's weights.
func openPart(p string) (formats.Model, error) {
	switch {
	case strings.HasSuffix(p, ".bin.index.json"):
		return openBinIndex(p)
	case strings.HasSuffix(p, ".bin"):
		return ckpt.OpenModel(p)
	}
	return safetensors.OpenModel(p)
}

// openBinIndex opens the .bin shards listed in a weight_map, in order of
// first appearance, and checks that every mapped tensor is in its shard.
func openBinIndex(p string) (formats.Model, error) {
	f, _, err := formats.OpenRegular(p, math.MaxInt64) // bounded below with its own message
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if len(b) > maxIndexSize {
		return nil, formatError(p, "", fmt.Sprintf("larger than %d bytes", maxIndexSize))
	}
	// json.Decoder keeps the weight_map order, which decides the shard order.
	shards, want, err := weightMap(b)
	if err != nil {
		return nil, formatError(p, "", err.Error())
	}
	var parts []formats.Model
	closeAll := func() {
		for _, pt := range parts {
			pt.Close()
		}
	}
	dir := filepath.Dir(p)
	for _, s := range shards {
		if s != filepath.Base(s) {
			closeAll()
			return nil, formatError(p, "", fmt.Sprintf("shard %q is not a file name in the same folder", s))
		}
		part, err := ckpt.OpenModel(filepath.Join(dir, s))
		if err != nil {
			closeAll()
			return nil, err
		}
		parts = append(parts, part)
	}
	sh, err := formats.NewSharded(p, formats.Info{Format: "ckpt", Files: joinAll(dir, shards)}, parts, nil)
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, t := range sh.Tensors() {
		if s, ok := want[t.Name]; ok && filepath.Join(dir, s) != t.File {
			closeAll()
			return nil, formatError(p, t.Name, fmt.Sprintf("mapped to %s but found in %s", s, t.File))
		}
		delete(want, t.Name)
	}
	for name, s := range want {
		closeAll()
		return nil, formatError(p, name, fmt.Sprintf("mapped to %s but not found there", s))
	}
	return sh, nil
}

func joinAll(dir string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = filepath.Join(dir, n)
	}
	return out
}

// weightMap reads {"weight_map": {tensor: shard}} keeping the shard order
// of first appearance.
func weightMap(b []byte) (shards []string, m map[string]string, err error) {
	var idx struct {
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, nil, err
	}
	if idx.WeightMap == nil {
		return nil, nil, errors.New("no weight_map")
	}
	dec := json.NewDecoder(strings.NewReader(string(idx.WeightMap)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, errors.New("weight_map is not an object")
	}
	m = map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := tok.(string)
		var shard string
		if err := dec.Decode(&shard); err != nil {
			return nil, nil, fmt.Errorf("weight_map[%q]: %v", name, err)
		}
		m[name] = shard
		if !slices.Contains(shards, shard) {
			shards = append(shards, shard)
		}
	}
	return shards, m, nil
}

// add lists a component's tensors under their prefixed names.
func (m *Model) add(c Component, part formats.Model) error {
	info := part.Info()
	m.info.Files = append(m.info.Files, info.Files...)
	m.info.Warnings = append(m.info.Warnings, info.Warnings...)
	if len(m.parts) == 1 {
		m.info.DataOffset = info.DataOffset
	}
	for _, t := range part.Tensors() {
		name := t.Name
		if !strings.HasPrefix(name, c.Prefix) {
			name = c.Prefix + name
		}
		if prev, dup := m.source[name]; dup {
			return formatError(m.path, name, fmt.Sprintf("from %s collides with tensor %q from %s", t.File, prev.tensor.Name, prev.tensor.File))
		}
		m.source[name] = source{part: part, tensor: t}
		rt := t
		rt.Name = name
		rt.Shape = slices.Clone(t.Shape)
		m.list = append(m.list, rt)
	}
	return nil
}

// Path returns the folder the model was opened from.
func (m *Model) Path() string { return m.path }

// Info describes the folder: format "diffusers", every component file in
// order, and the components' warnings.
func (m *Model) Info() formats.Info {
	info := m.info
	info.Files = slices.Clone(info.Files)
	info.Warnings = slices.Clone(info.Warnings)
	return info
}

// Tensors lists the tensors of the UNet, VAE and text encoders, in that
// order, under their prefixed names; callers must not modify it.
func (m *Model) Tensors() []formats.Tensor { return m.list }

// Metadata returns the pipeline class and diffusers version from
// model_index.json; the components' own metadata is not carried over.
func (m *Model) Metadata() formats.Metadata { return m.meta }

// Parts returns the component models in order.
func (m *Model) Parts() []formats.Model { return m.parts }

// ReadTensorAt reads from the component file that holds t, found by t's
// prefixed name.
func (m *Model) ReadTensorAt(t *formats.Tensor, p []byte, off int64) (int, error) {
	s, ok := m.source[t.Name]
	if !ok {
		return 0, fmt.Errorf("%s: tensor %q is not in this diffusers folder", m.path, t.Name)
	}
	if t.File != s.tensor.File || t.Offset != s.tensor.Offset || t.Size != s.tensor.Size {
		return 0, fmt.Errorf("%s: tensor %q: descriptor does not match %s", m.path, t.Name, s.tensor.File)
	}
	n, err := s.part.ReadTensorAt(&s.tensor, p, off)
	if err != nil {
		return n, fmt.Errorf("%s: tensor %q: %w", m.path, t.Name, err)
	}
	return n, nil
}

// Close closes every component file.
func (m *Model) Close() error {
	var errs []error
	for _, p := range m.parts {
		errs = append(errs, p.Close())
	}
	m.parts = nil
	return errors.Join(errs...)
}
