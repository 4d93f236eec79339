package refcache

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sdtool/sdtool/infer"
)

func sample(n int) *infer.Result {
	r := &infer.Result{Width: 16, Height: 8, NaNPixels: 2, Latent: make([]float32, n), Pixels: make([]float32, 3*16*8),
		Blocks: []infer.BlockOutput{{Name: "input_blocks.1", Values: []float32{1, -2.5, 3}}, {Name: "out", Values: []float32{}}}}
	for i := range r.Latent {
		r.Latent[i] = float32(i) * 0.25
	}
	return r
}

// An entry reads back as stored; a damaged one is a miss and is removed.
func TestRoundTripAndDamage(t *testing.T) {
	c := &Cache{Dir: t.TempDir(), Max: 1 << 20}
	want := sample(64)
	if err := c.Put(context.Background(), "k", want); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get("k")
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Get = %+v, %v; want %+v", got, ok, want)
	}
	data, err := os.ReadFile(c.path("k"))
	if err != nil {
		t.Fatal(err)
	}
	data[len(magic)+20] ^= 1
	if err := os.WriteFile(c.path("k"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("k"); ok {
		t.Error("a damaged entry was read")
	}
	if _, err := os.Stat(c.path("k")); !os.IsNotExist(err) {
		t.Errorf("the damaged entry is still there: %v", err)
	}
	if _, err := decode(encode(want)[:40]); err == nil {
		t.Error("a truncated entry decoded")
	}
}

// The key follows the files' identity and the settings.
func TestKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	k1, err := Key([]string{path}, "seed 1")
	if err != nil {
		t.Fatal(err)
	}
	if k2, _ := Key([]string{path}, "seed 1"); k2 != k1 {
		t.Error("the same file and settings gave two keys")
	}
	if k2, _ := Key([]string{path}, "seed 2"); k2 == k1 {
		t.Error("other settings gave the same key")
	}
	if err := os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if k2, _ := Key([]string{path}, "seed 1"); k2 == k1 {
		t.Error("a file modified since gave the same key")
	}
	if _, err := Key([]string{path + ".missing"}, ""); err == nil {
		t.Error("a missing file gave a key")
	}
}

// The directory stays within Max, the least recently used going first, and
// Clear empties it.
func TestBoundAndClear(t *testing.T) {
	one := int64(len(encode(sample(1000))))
	c := &Cache{Dir: t.TempDir(), Max: 2*one + one/2}
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	for i, k := range []string{"a", "b"} {
		if err := c.Put(ctx, k, sample(1000)); err != nil {
			t.Fatal(err)
		}
		ts := old.Add(time.Duration(i) * time.Minute)
		os.Chtimes(c.path(k), ts, ts)
	}
	c.Get("a") // now the most recently used
	if err := c.Put(ctx, "c", sample(1000)); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, err := os.Stat(c.path(k)); (err == nil) != want {
			t.Errorf("entry %s kept %v, want %v", k, err == nil, want)
		}
	}
	n, err := c.Clear()
	if err != nil || n != 2 {
		t.Fatalf("Clear = %d, %v; want 2 entries removed", n, err)
	}
	if es, _ := c.entries(); len(es) != 0 {
		t.Errorf("%d entries left after Clear", len(es))
	}
}
