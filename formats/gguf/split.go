package gguf

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/sdtool/sdtool/formats"
)

// Split GGUF keys written by llama.cpp's gguf-split into every shard.
const (
	SplitNoKey           = "split.no"            // u16, 0-based shard index
	SplitCountKey        = "split.count"         // u16, number of shards
	SplitTensorsCountKey = "split.tensors.count" // i32, tensors over all shards
)

// splitName matches gguf-split's shard names: PREFIX-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// SplitPath returns the path of shard no (1-based) of count for prefix, in
// gguf-split's naming.
func SplitPath(prefix string, no, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, no, count)
}

// ParseSplitPath reports whether path is named like a shard of a split GGUF
// and returns its prefix, 1-based shard number and shard count.
func ParseSplitPath(path string) (prefix string, no, count int, ok bool) {
	m := splitName.FindStringSubmatch(path)
	if m == nil {
		return "", 0, 0, false
	}
	no, _ = strconv.Atoi(m[2])
	count, _ = strconv.Atoi(m[3])
	return m[1], no, count, true
}

// OpenModel opens a GGUF file as a formats.Model: a shard of a split GGUF
// (NAME-0000k-of-0000n.gguf) opens all n shards as one *formats.Sharded, any
// other file opens as a *File.
func OpenModel(path string) (formats.Model, error) {
	if _, _, _, ok := ParseSplitPath(filepath.Base(path)); ok {
		return OpenSplit(path)
	}
	return Open(path)
}

// OpenSplit opens every shard of the split GGUF that path belongs to. The
// shards' split.no and split.count keys, when present, must agree with their
// names; the metadata is the first shard's.
func OpenSplit(path string) (*formats.Sharded, error) {
	dir, base := filepath.Split(path)
	prefix, no, count, ok := ParseSplitPath(base)
	if !ok {
		return nil, formatError(path, "", "not named like a split GGUF shard (NAME-00001-of-00003.gguf)")
	}
	if count < 1 || no < 1 || no > count {
		return nil, formatError(path, "", fmt.Sprintf("shard number %d of %d is out of range", no, count))
	}
	parts := make([]formats.Model, 0, count)
	files := make([]string, 0, count)
	closeAll := func() {
		for _, p := range parts {
			p.Close()
		}
	}
	var first *File
	for k := 1; k <= count; k++ {
		name := filepath.Join(dir, SplitPath(prefix, k, count))
		f, err := Open(name)
		if err != nil {
			closeAll()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: shard %d of %d is missing: %w", path, k, count, err)
			}
			return nil, err
		}
		parts = append(parts, f)
		files = append(files, name)
		if err := checkShard(f, k, count); err != nil {
			closeAll()
			return nil, err
		}
		if k == 1 {
			first = f
		}
	}
	total := 0
	for _, p := range parts {
		total += len(p.Tensors())
	}
	if kv, ok := first.meta.Get(SplitTensorsCountKey); ok {
		if n, isInt := intValue(kv.Value); isInt && n != int64(total) {
			closeAll()
			return nil, formatError(first.path, "", fmt.Sprintf("%s is %d but the %d shards hold %d tensors", SplitTensorsCountKey, n, count, total))
		}
	}
	info := first.Info()
	info.Files = files
	info.Warnings = nil // NewSharded gathers every shard's warnings
	s, err := formats.NewSharded(path, info, parts, nil)
	if err != nil {
		closeAll()
		return nil, err
	}
	return s, nil
}

// checkShard compares a shard's split keys, where present, with its name.
func checkShard(f *File, no, count int) error {
	if kv, ok := f.meta.Get(SplitCountKey); ok {
		n, isInt := intValue(kv.Value)
		if !isInt || n != int64(count) {
			return formatError(f.path, "", fmt.Sprintf("%s is %v but the name says %d shards", SplitCountKey, kv.Value, count))
		}
	}
	if kv, ok := f.meta.Get(SplitNoKey); ok {
		n, isInt := intValue(kv.Value)
		if !isInt || n != int64(no-1) {
			return formatError(f.path, "", fmt.Sprintf("%s is %v but the name says shard %d (split.no is 0-based)", SplitNoKey, kv.Value, no))
		}
	}
	return nil
}

// intValue converts any integer metadata value to int64; uint64 values past
// the int64 range report false.
func intValue(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > 1<<63-1 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}
