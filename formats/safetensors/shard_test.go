package safetensors

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// shardSet writes 3 shards named NAME-0000k-of-00003.safetensors into dir,
// each with two tensors, and returns the paths, the tensor names per shard
// and each tensor's data.
func shardSet(t *testing.T, dir, stem string) (paths []string, names [][]string, data map[string][]byte) {
	t.Helper()
	data = map[string][]byte{}
	for k := 1; k <= 3; k++ {
		tensors := []formats.Tensor{
			{Name: fmt.Sprintf("blk.%d.w", k), Type: formats.F16, Shape: []int64{2, int64(k)}},
			{Name: fmt.Sprintf("blk.%d.b", k), Type: formats.F32, Shape: []int64{int64(k)}},
		}
		b, per := writeAll(t, tensors, map[string]string{"shard": fmt.Sprint(k)}, nil)
		p := filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%05d.safetensors", stem, k, 3))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		names = append(names, []string{tensors[0].Name, tensors[1].Name})
		for i, tn := range tensors {
			data[tn.Name] = per[i]
		}
	}
	return paths, names, data
}

// indexJSON builds an index.json whose weight_map lists entries in the given order.
func indexJSON(entries ...[2]string) string {
	var sb strings.Builder
	sb.WriteString(`{"metadata":{"total_size":123456789},"weight_map":{`)
	for i, e := range entries {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%q:%q", e[0], e[1])
	}
	sb.WriteString("}}")
	return sb.String()
}

func fullIndex(paths []string, names [][]string) [][2]string {
	var e [][2]string
	// Tensors listed by name, as Hugging Face writes them, not in shard order.
	for k := len(paths) - 1; k >= 0; k-- {
		for _, n := range names[k] {
			e = append(e, [2]string{n, filepath.Base(paths[k])})
		}
	}
	return e
}

func checkSharded(t *testing.T, m formats.Model, paths []string, names [][]string, data map[string][]byte) {
	t.Helper()
	s, ok := m.(*formats.Sharded)
	if !ok {
		t.Fatalf("got %T, want *formats.Sharded", m)
	}
	if got := s.Info().Files; !slices.Equal(got, paths) {
		t.Errorf("Files = %q, want %q", got, paths)
	}
	if f := s.Info().Format; f != "safetensors" {
		t.Errorf("Format = %q", f)
	}
	var want []string
	for _, n := range names {
		want = append(want, n...)
	}
	var got []string
	for _, tn := range s.Tensors() {
		got = append(got, tn.Name)
		d, err := formats.ReadTensor(s, &tn)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(d, data[tn.Name]) {
			t.Errorf("tensor %q: data differs", tn.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("tensors %q, want %q (shard order, then file order)", got, want)
	}
	if v, _ := s.Metadata().String("shard"); v != "1" {
		t.Errorf("metadata shard = %q, want the first shard's", v)
	}
}

func TestShardedIndex(t *testing.T) {
	dir := t.TempDir()
	paths, names, data := shardSet(t, dir, "model")
	idx := filepath.Join(dir, "model.safetensors.index.json")
	if err := os.WriteFile(idx, []byte(indexJSON(fullIndex(paths, names)...)), 0o644); err != nil {
		t.Fatal(err)
	}
	// From the index, from any shard (which finds the index), and through formats.Open.
	for _, open := range []string{idx, paths[1], paths[2]} {
		for _, via := range []string{"OpenModel", "formats.Open"} {
			t.Run(filepath.Base(open)+"/"+via, func(t *testing.T) {
				var m formats.Model
				var err error
				if via == "OpenModel" {
					m, err = OpenModel(open)
				} else {
					m, err = formats.Open(open)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if m.Path() != open {
					t.Errorf("Path = %q", m.Path())
				}
				checkSharded(t, m, paths, names, data)
			})
		}
	}
}

func TestShardedByName(t *testing.T) {
	dir := t.TempDir()
	paths, names, data := shardSet(t, dir, "diffusion_pytorch_model")
	// An unrelated index beside the shards must not be used.
	other := filepath.Join(dir, "other.safetensors.index.json")
	if err := os.WriteFile(other, []byte(indexJSON([2]string{"x", "x.safetensors"})), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := OpenModel(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkSharded(t, m, paths, names, data)

	// A single shard opened with Open stays one file.
	f, err := Open(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors()) != 2 {
		t.Errorf("Open(shard) has %d tensors", len(f.Tensors()))
	}
	f.Close()

	// The shards' own index, when broken, is reported rather than ignored.
	own := filepath.Join(dir, "diffusion_pytorch_model.safetensors.index.json")
	if err := os.WriteFile(own, []byte(`{"weight_map":{`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenModel(paths[0]); err == nil || !strings.Contains(err.Error(), own) {
		t.Errorf("broken index: err = %v", err)
	}
	os.Remove(own)

	os.Remove(paths[2])
	if _, err := OpenModel(paths[0]); err == nil || !strings.Contains(err.Error(), "shard 3 of 3 is missing") {
		t.Errorf("missing shard: err = %v", err)
	}
}

func TestShardedIndexErrors(t *testing.T) {
	dir := t.TempDir()
	paths, names, _ := shardSet(t, dir, "model")
	b1, b2, b3 := filepath.Base(paths[0]), filepath.Base(paths[1]), filepath.Base(paths[2])
	full := fullIndex(paths, names)
	cases := []struct {
		name  string
		index string
		want  []string
	}{
		{"unlisted tensor", indexJSON(full[1:]...), []string{`tensor "blk.3.w"`, b3, "not listed in weight_map"}},
		{"wrong shard", indexJSON(append([][2]string{{"blk.3.w", b1}}, full[1:]...)...), []string{`tensor "blk.3.w"`, b1, b3}},
		{"absent tensor", indexJSON(append([][2]string{{"ghost", b2}}, full...)...), []string{`tensor "ghost"`, b2, "does not contain it"}},
		{"missing shard file", indexJSON(append([][2]string{{"lost", "model-00004-of-00003.safetensors"}}, full...)...), []string{"model-00004-of-00003.safetensors", "missing"}},
		{"no weight_map", `{"metadata":{}}`, []string{"no weight_map"}},
		{"empty weight_map", `{"weight_map":{}}`, []string{"weight_map is empty"}},
		{"weight_map array", `{"weight_map":[]}`, []string{"weight_map is not an object"}},
		{"value not string", `{"weight_map":{"a":1}}`, []string{`tensor "a" is not a file name`}},
		{"duplicate tensor", `{"weight_map":{"a":"x","a":"y"}}`, []string{`tensor "a" appears twice`}},
		{"not json", `{"weight_map":`, []string{"invalid index: unexpected end"}},
		{"top array", `[]`, []string{"not a JSON object"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			idx := filepath.Join(dir, "test.index.json")
			if err := os.WriteFile(idx, []byte(c.index), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := OpenModel(idx)
			if err == nil {
				m.Close()
				t.Fatal("no error")
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.HasPrefix(msg, idx+": ") {
				t.Errorf("error %q does not start with the index path", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestShardNames(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		{"model-00001-of-00003.safetensors", true},
		{"/a/b/diffusion_pytorch_model-00002-of-00002.safetensors", true},
		{"x-1-of-2.safetensors", true},
		{"model-00004-of-00003.safetensors", false},
		{"model-00000-of-00003.safetensors", false},
		{"model.safetensors", false},
		{"model-00001-of-00003.gguf", false},
		{"-00001-of-00003.safetensors", false},
	}
	for _, c := range cases {
		if got := IsShardName(c.name); got != c.want {
			t.Errorf("IsShardName(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestShardCorrupt(t *testing.T) {
	dir := t.TempDir()
	paths, _, _ := shardSet(t, dir, "model")
	if err := os.WriteFile(paths[1], []byte("not a safetensors file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenModel(paths[0])
	if err == nil || !strings.Contains(err.Error(), paths[1]+": ") {
		t.Errorf("err = %v, want one naming %s", err, paths[1])
	}
}
