// Package refcache keeps reference renders: the images, final latents and
// per-block outputs of a source model for given settings, so that
// comparing a second copy with generate --compare, or a ladder's next
// report, does not render the source again. An entry is keyed by the
// source files' identity (path, size, modification time) and the
// settings, and the directory is bounded in size, the least recently used
// entries going first.
package refcache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/pipeline"
)

// magic starts every entry (and names its layout's version).
const magic = "sdtool reference render 2\n"

// ext is the entries' file extension.
const ext = ".ref"

// Cache is a directory of reference renders.
type Cache struct {
	// Dir holds the entries.
	Dir string
	// Max bounds the entries' total size in bytes.
	Max int64
}

// Key returns the key of a render of the files (paths, any order matters
// as given) with settings (every option that changes the render, as text).
func Key(files []string, settings string) (string, error) {
	h := sha256.New()
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", abs, fi.Size(), fi.ModTime().UnixNano())
	}
	fmt.Fprintf(h, "\x01%s", settings)
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (c *Cache) path(key string) string { return filepath.Join(c.Dir, key+ext) }

// Get returns the render stored under key; ok is false when there is none
// (or the entry is damaged, which is removed).
func (c *Cache) Get(key string) (r *infer.Result, ok bool) {
	p := c.path(key)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	if r, err = decode(data); err != nil {
		os.Remove(p)
		return nil, false
	}
	now := time.Now()
	os.Chtimes(p, now, now) // least recently used goes first
	return r, true
}

// Put stores r under key (atomically), then trims the directory to Max.
func (c *Cache) Put(ctx context.Context, key string, r *infer.Result) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	data := encode(r)
	if int64(len(data)) > c.Max {
		return nil // larger than the whole cache: not kept
	}
	err := pipeline.WriteAtomic(ctx, c.path(key), pipeline.PublishOptions{Force: true}, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	return c.trim()
}

// entry is one stored render.
type entry struct {
	path string
	size int64
	used time.Time
}

func (c *Cache) entries() ([]entry, error) {
	des, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), ext) || !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		out = append(out, entry{filepath.Join(c.Dir, de.Name()), fi.Size(), fi.ModTime()})
	}
	return out, nil
}

// trim removes the least recently used entries until the rest fit Max.
func (c *Cache) trim() error {
	es, err := c.entries()
	if err != nil {
		return err
	}
	slices.SortFunc(es, func(a, b entry) int { return b.used.Compare(a.used) })
	var total int64
	for _, e := range es {
		total += e.size
		if total > c.Max {
			if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Clear removes every entry and reports how many there were; files other
// than entries are left alone.
func (c *Cache) Clear() (int, error) {
	es, err := c.entries()
	if err != nil {
		return 0, err
	}
	for _, e := range es {
		if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	return len(es), nil
}

// encode lays r out as: magic, width, height, frames, NaN count, latent, pixels,
// block count, each block's name and values (lengths as uint32, values as
// float32, little-endian), and a CRC-32 of everything before it. Float
// latents and activations do not compress (their mantissas are noise), so
// the values are stored as they are.
func encode(r *infer.Result) []byte {
	var b []byte
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Width))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Height))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Frames))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.NaNPixels))
	b = appendFloats(b, r.Latent)
	b = appendFloats(b, r.Pixels)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Blocks)))
	for _, bl := range r.Blocks {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(bl.Name)))
		b = append(b, bl.Name...)
		b = appendFloats(b, bl.Values)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func appendFloats(b []byte, v []float32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// errDamaged is returned for an entry that is not one encode wrote.
var errDamaged = errors.New("reference cache entry is damaged")

// reader reads an entry's fields from its bytes, remembering the first
// error. A length is checked against the bytes left before anything is
// allocated, so a damaged entry never allocates more than its own size.
type reader struct {
	b   []byte
	err error
}

func (d *reader) u32() uint32 {
	if d.err == nil && len(d.b) < 4 {
		d.err = errDamaged
	}
	if d.err != nil {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *reader) bytes(n uint32) []byte {
	if d.err == nil && uint64(n) > uint64(len(d.b)) {
		d.err = errDamaged
	}
	if d.err != nil {
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *reader) floats() []float32 {
	n := d.u32()
	raw := d.bytes(uint32(min(uint64(n)*4, math.MaxUint32)))
	if d.err != nil {
		return nil
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
}

func decode(data []byte) (*infer.Result, error) {
	if len(data) < len(magic)+4 || string(data[:len(magic)]) != magic {
		return nil, errDamaged
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, errDamaged
	}
	d := &reader{b: body[len(magic):]}
	r := &infer.Result{Width: int(d.u32()), Height: int(d.u32()), Frames: int(d.u32()), NaNPixels: int(d.u32())}
	r.Latent = d.floats()
	r.Pixels = d.floats()
	for n := d.u32(); n > 0 && d.err == nil; n-- {
		name := d.bytes(d.u32())
		r.Blocks = append(r.Blocks, infer.BlockOutput{Name: string(name), Values: d.floats()})
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errDamaged
	}
	return r, nil
}
