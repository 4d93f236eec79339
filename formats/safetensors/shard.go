package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// maxIndexSize bounds the index.json read into memory (real ones are a few MB).
const maxIndexSize = MaxHeaderSize

// maxShards bounds the shard count read from a NAME-k-of-n file name.
const maxShards = 10000

// shardName matches the Hugging Face shard naming NAME-00002-of-00005.safetensors.
var shardName = regexp.MustCompile(`^(.+)-([0-9]+)-of-([0-9]+)\.safetensors$`)

// IsIndex reports whether path names a sharded checkpoint's index (*.index.json).
func IsIndex(path string) bool { return strings.HasSuffix(path, ".index.json") }

// IsShardName reports whether path's base name looks like NAME-0000k-of-0000n.safetensors.
func IsShardName(path string) bool {
	_, _, _, ok := parseShardName(filepath.Base(path))
	return ok
}

// OpenModel opens path as a formats.Model: a sharded checkpoint when path is
// an index.json or a shard name (see OpenSharded), else a single file.
func OpenModel(path string) (formats.Model, error) {
	if IsIndex(path) || IsShardName(path) {
		return OpenSharded(path)
	}
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// OpenSharded opens every shard of a sharded checkpoint as one model, from
// its index.json or from any shard named NAME-0000k-of-0000n.safetensors. For
// a shard name, an index.json beside it that lists the shard is preferred;
// without one, all n numbered shards are opened. With an index, every
// weight_map entry must be in its shard and every shard tensor in the map.
func OpenSharded(path string) (*formats.Sharded, error) {
	if IsIndex(path) {
		return openIndex(path, path)
	}
	base := filepath.Base(path)
	stem, _, n, ok := parseShardName(base)
	if !ok {
		return nil, fmt.Errorf("%s: not an index.json or a NAME-0000k-of-0000n.safetensors shard name", path)
	}
	idx, err := findIndex(path)
	if err != nil {
		return nil, err
	}
	if idx != "" {
		return openIndex(idx, path)
	}
	dir := filepath.Dir(path)
	m := shardName.FindStringSubmatch(base)
	width := len(m[2])
	files := make([]string, 0, n)
	for k := 1; k <= n; k++ {
		name := fmt.Sprintf("%s-%0*d-of-%s.safetensors", stem, width, k, m[3])
		files = append(files, filepath.Join(dir, name))
	}
	for k, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("%s: shard %d of %d is missing: %w", path, k+1, n, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: shard %d of %d is not a regular file (%s)", path, k+1, n, st.Mode().Type())
		}
	}
	parts, err := openParts(files)
	if err != nil {
		return nil, err
	}
	return joinParts(path, parts)
}

// parseShardName splits NAME-k-of-n.safetensors.
func parseShardName(base string) (stem string, k, n int, ok bool) {
	m := shardName.FindStringSubmatch(base)
	if m == nil {
		return "", 0, 0, false
	}
	k, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || k < 1 || k > n || n > maxShards {
		return "", 0, 0, false
	}
	return m[1], k, n, true
}

// findIndex looks beside shard for an index.json that lists it: first
// NAME.safetensors.index.json, whose errors are reported, then any other
// *.index.json in the folder, skipped when unreadable. It returns "" when
// there is none.
func findIndex(shard string) (string, error) {
	dir, base := filepath.Split(shard)
	stem, _, _, _ := parseShardName(base)
	first := filepath.Join(dir, stem+".safetensors.index.json")
	candidates := []string{first}
	if more, err := filepath.Glob(filepath.Join(dir, "*.index.json")); err == nil {
		for _, c := range more {
			if c != first {
				candidates = append(candidates, c)
			}
		}
	}
	for i, c := range candidates {
		idx, err := readIndex(c)
		if err != nil {
			if i == 0 && !errors.Is(err, fs.ErrNotExist) {
				return "", err // the shards' own index is broken: say so rather than guess
			}
			continue
		}
		for _, e := range idx.entries {
			if filepath.Clean(e.file) == base {
				return c, nil
			}
		}
	}
	return "", nil
}

type indexEntry struct {
	tensor, file string
}

type index struct {
	entries []indexEntry // weight_map in JSON order
}

// readIndex parses an index.json's weight_map, keeping its order and
// refusing duplicate tensor names. total_size and other metadata are not used.
func readIndex(path string) (*index, error) {
	f, _, err := formats.OpenRegular(path, math.MaxInt64) // bounded below with its own message
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxIndexSize {
		return nil, fmt.Errorf("%s: index is larger than %d bytes", path, maxIndexSize)
	}
	return parseIndex(path, data)
}

// parseIndex parses the index.json data read from path (named in errors).
func parseIndex(path string, data []byte) (*index, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	bad := func(format string, args ...any) error {
		for i, a := range args {
			if a == io.EOF || a == io.ErrUnexpectedEOF {
				args[i] = "unexpected end of the JSON"
			}
		}
		return fmt.Errorf("%s: invalid index: %s", path, fmt.Sprintf(format, args...))
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, bad("%v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, bad("not a JSON object")
	}
	idx := &index{}
	var haveMap bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("%v", err)
		}
		key, _ := tok.(string)
		if key != "weight_map" {
			var skip json.RawMessage // metadata (total_size is not trusted) and anything else
			if err := dec.Decode(&skip); err != nil {
				return nil, bad("%v", err)
			}
			continue
		}
		if haveMap {
			return nil, bad("duplicate weight_map")
		}
		haveMap = true
		if tok, err := dec.Token(); err != nil {
			return nil, bad("%v", err)
		} else if d, ok := tok.(json.Delim); !ok || d != '{' {
			return nil, bad("weight_map is not an object")
		}
		seen := map[string]struct{}{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, bad("%v", err)
			}
			name, _ := tok.(string)
			if _, dup := seen[name]; dup {
				return nil, bad("tensor %q appears twice in weight_map", name)
			}
			seen[name] = struct{}{}
			tok, err = dec.Token()
			if err != nil {
				return nil, bad("%v", err)
			}
			file, ok := tok.(string)
			if !ok || file == "" {
				return nil, bad("weight_map entry of tensor %q is not a file name", name)
			}
			// Shards live beside their index: a path could read any file
			// on the system (../outside/secret.safetensors, /dev/zero).
			if file != filepath.Base(file) || strings.ContainsAny(file, `/\`) || file == "." || file == ".." {
				return nil, bad("tensor %q: shard %q is not a file name in the index's folder", name, file)
			}
			idx.entries = append(idx.entries, indexEntry{tensor: name, file: file})
		}
		if _, err := dec.Token(); err != nil {
			return nil, bad("%v", err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("%v", err)
	}
	if !haveMap {
		return nil, bad("no weight_map")
	}
	if len(idx.entries) == 0 {
		return nil, bad("weight_map is empty")
	}
	return idx, nil
}

// openIndex opens the shards listed by the index at path; opened is the path
// the caller asked for (the index or one shard), which the model reports.
func openIndex(path, opened string) (*formats.Sharded, error) {
	idx, err := readIndex(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	// Shards in name order, which for NAME-0000k-of-0000n is numeric order.
	var rel []string
	want := map[string]string{} // tensor -> joined shard path
	for _, e := range idx.entries {
		p := filepath.Join(dir, e.file)
		want[e.tensor] = p
		if !slices.Contains(rel, e.file) {
			rel = append(rel, e.file)
		}
	}
	slices.Sort(rel)
	files := make([]string, len(rel))
	for i, r := range rel {
		files[i] = filepath.Join(dir, r)
		st, err := os.Stat(files[i])
		if err != nil {
			return nil, fmt.Errorf("%s: shard %q listed in weight_map is missing: %w", path, r, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: shard %q listed in weight_map is not a regular file (%s)", path, r, st.Mode().Type())
		}
	}
	parts, err := openParts(files)
	if err != nil {
		return nil, err
	}
	if err := checkIndex(path, idx, want, parts); err != nil {
		closeParts(parts)
		return nil, err
	}
	return joinParts(opened, parts)
}

// checkIndex cross-checks the weight_map against the shards' own headers.
func checkIndex(path string, idx *index, want map[string]string, parts []formats.Model) error {
	have := map[string]string{} // tensor -> shard path that holds it
	for _, p := range parts {
		for _, t := range p.Tensors() {
			mapped, ok := want[t.Name]
			if !ok {
				return fmt.Errorf("%s: tensor %q in shard %s is not listed in weight_map", path, t.Name, t.File)
			}
			if mapped != t.File {
				return fmt.Errorf("%s: tensor %q: weight_map puts it in %s, but it is in %s", path, t.Name, mapped, t.File)
			}
			have[t.Name] = t.File
		}
	}
	for _, e := range idx.entries {
		if _, ok := have[e.tensor]; !ok {
			return fmt.Errorf("%s: tensor %q: weight_map puts it in %s, which does not contain it", path, e.tensor, want[e.tensor])
		}
	}
	return nil
}

func openParts(files []string) ([]formats.Model, error) {
	parts := make([]formats.Model, 0, len(files))
	for _, f := range files {
		sf, err := Open(f)
		if err != nil {
			closeParts(parts)
			return nil, err
		}
		parts = append(parts, sf)
	}
	return parts, nil
}

func closeParts(parts []formats.Model) {
	for _, p := range parts {
		p.Close()
	}
}

func joinParts(path string, parts []formats.Model) (*formats.Sharded, error) {
	info := formats.Info{Format: "safetensors"}
	for _, p := range parts {
		info.Files = append(info.Files, p.Path())
	}
	if len(parts) > 0 {
		info.DataOffset = parts[0].Info().DataOffset
	}
	s, err := formats.NewSharded(path, info, parts, nil)
	if err != nil {
		closeParts(parts)
		return nil, err
	}
	return s, nil
}
