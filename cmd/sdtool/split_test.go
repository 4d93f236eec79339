package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
)

// splitInputs are the committed GGUFs the split tests cut.
var splitInputs = []string{"../../testdata/tiny-sd1.gguf", "../../testdata/tiny-flux.gguf"}

// splitFlagSets are gguf-split flag sets, each given to both programs as is.
var splitFlagSets = [][]string{
	{"--split-max-size", "1M"},
	{"--split-max-tensors", "100"},
	{"--split-max-tensors", "300", "--no-tensor-first-split"},
	{"--split-max-size", "2M", "--no-tensor-first-split"},
	{}, // gguf-split's default: 128 tensors per shard
}

// shardFiles lists the files of dir, sorted.
func shardFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// sameFiles compares every file of dir a with the file of that name in b.
func sameFiles(t *testing.T, what, a, b string) {
	t.Helper()
	na, nb := shardFiles(t, a), shardFiles(t, b)
	if !slices.Equal(na, nb) {
		t.Errorf("%s: files %q, want %q", what, nb, na)
		return
	}
	for _, n := range na {
		x, err1 := os.ReadFile(filepath.Join(a, n))
		y, err2 := os.ReadFile(filepath.Join(b, n))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s: %s differs from gguf-split's (%d bytes, want %d)", what, n, len(y), len(x))
		}
	}
}

// TestSplitMatchesGGUFSplit compares split and split --merge with llama.cpp's
// gguf-split on the same inputs and flags. SDTOOL_GGUF_SPLIT names its
// binary, built with GGML_MAX_NAME=160 so that SD names load:
//
//	cmake -B build -DCMAKE_C_FLAGS=-DGGML_MAX_NAME=160 -DCMAKE_CXX_FLAGS=-DGGML_MAX_NAME=160
//	cmake --build build --target llama-gguf-split -j2
func TestSplitMatchesGGUFSplit(t *testing.T) {
	oracle := os.Getenv("SDTOOL_GGUF_SPLIT")
	if oracle == "" {
		t.Skip("SDTOOL_GGUF_SPLIT (the path of llama.cpp's llama-gguf-split) is not set")
	}
	for _, in := range splitInputs {
		for _, flags := range splitFlagSets {
			what := filepath.Base(in) + " " + strings.Join(flags, " ")
			want, got := t.TempDir(), t.TempDir()
			cmd := exec.Command(oracle, append(slices.Clone(flags), in, filepath.Join(want, "m"))...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: gguf-split: %v\n%s", what, err, out)
			}
			args := append([]string{"split", in, "-o", filepath.Join(got, "m")}, flags...)
			if code, _, errOut := runApp(t, args...); code != 0 {
				t.Fatalf("%s: %s", what, errOut)
			}
			sameFiles(t, what, want, got)

			first := filepath.Join(want, shardFiles(t, want)[0])
			joinWant, joinGot := filepath.Join(t.TempDir(), "j.gguf"), filepath.Join(t.TempDir(), "j.gguf")
			if out, err := exec.Command(oracle, "--merge", first, joinWant).CombinedOutput(); err != nil {
				t.Fatalf("%s: gguf-split --merge: %v\n%s", what, err, out)
			}
			if code, _, errOut := runApp(t, "split", "--merge", first, "-o", joinGot); code != 0 {
				t.Fatalf("%s: merge: %s", what, errOut)
			}
			sameFiles(t, what+" --merge", filepath.Dir(joinWant), filepath.Dir(joinGot))
		}
	}
	// gguf-split (ggml's reader) joins the shards quantize writes as split
	// --merge joins them.
	dir := t.TempDir()
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "Q4_K_M", "-o", filepath.Join(dir, "q.gguf"), "--split-max-size", "1M"); code != 0 {
		t.Fatal(errOut)
	}
	first := filepath.Join(dir, "q-00001-of-00003.gguf")
	joinWant, joinGot := filepath.Join(t.TempDir(), "j.gguf"), filepath.Join(t.TempDir(), "j.gguf")
	if out, err := exec.Command(oracle, "--merge", first, joinWant).CombinedOutput(); err != nil {
		t.Fatalf("gguf-split --merge of quantize's shards: %v\n%s", err, out)
	}
	if code, _, errOut := runApp(t, "split", "--merge", first, "-o", joinGot); code != 0 {
		t.Fatal(errOut)
	}
	sameFiles(t, "quantize's shards --merge", filepath.Dir(joinWant), filepath.Dir(joinGot))
}

// A split with --keep-dims and its merge keep every tensor's name, type,
// shape and bytes and every key; the shards open as one model.
func TestSplitRoundTrip(t *testing.T) {
	in := splitInputs[0]
	dir := t.TempDir()
	if code, _, errOut := runApp(t, "split", in, "--split-max-size", "1M", "--keep-dims", "-o", filepath.Join(dir, "m.gguf")); code != 0 {
		t.Fatal(errOut)
	}
	if got := shardFiles(t, dir); len(got) != 4 || got[0] != "m-00001-of-00004.gguf" {
		t.Fatalf("shards %q", got)
	}
	joined := filepath.Join(t.TempDir(), "j.gguf")
	if code, _, errOut := runApp(t, "split", "--merge", filepath.Join(dir, "m-00003-of-00004.gguf"), "--keep-dims", "-o", joined); code != 0 {
		t.Fatal(errOut)
	}
	src := openModel(t, in)
	for _, path := range []string{filepath.Join(dir, "m-00001-of-00004.gguf"), joined} {
		m := openModel(t, path)
		sameTensors(t, src, m)
		if got, want := gguf.StripSplitKeys(m.Metadata()), src.Metadata(); len(got) != len(want) {
			t.Errorf("%s: %d keys besides split.*, the input has %d", path, len(got), len(want))
		}
		if kv, ok := m.Metadata().Get(gguf.SplitTensorsCountKey); !ok || kv.Value != int32(len(src.Tensors())) {
			t.Errorf("%s: split.tensors.count %v", path, kv.Value)
		}
	}
}

func openModel(t *testing.T, path string) formats.Model {
	t.Helper()
	m, err := formats.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// sameTensors checks that b holds a's tensors in order, with the same
// types, shapes and bytes.
func sameTensors(t *testing.T, a, b formats.Model) {
	t.Helper()
	ta, tb := a.Tensors(), b.Tensors()
	if len(ta) != len(tb) {
		t.Fatalf("%s: %d tensors, want %d", b.Path(), len(tb), len(ta))
	}
	for i := range ta {
		x, y := &ta[i], &tb[i]
		if x.Name != y.Name || x.Type != y.Type || !slices.Equal(x.Shape, y.Shape) {
			t.Fatalf("%s: tensor %d is %q %s %v, want %q %s %v", b.Path(), i, y.Name, y.Type, y.Shape, x.Name, x.Type, x.Shape)
		}
		bx, err1 := formats.ReadTensor(a, x)
		by, err2 := formats.ReadTensor(b, y)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(bx, by) {
			t.Fatalf("%s: tensor %q: bytes differ", b.Path(), x.Name)
		}
	}
}

// A shard that cannot be created (its name is taken by a folder) leaves
// no shard and no partial file behind: the set is complete or absent.
func TestSplitAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "m-00003-of-00004.gguf.partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runApp(t, "split", splitInputs[0], "--split-max-size", "1M", "-o", filepath.Join(dir, "m"))
	if code != 1 || !strings.Contains(errOut, "m-00003-of-00004.gguf") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := shardFiles(t, dir); !slices.Equal(got, []string{"m-00003-of-00004.gguf.partial"}) {
		t.Errorf("left %q", got)
	}
}

func TestSplitFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--split-max-size", "1M", "--split-max-tensors", "3"}, "give one or the other"},
		{[]string{"--split-max-size", "0M"}, "want a positive size"},
		{[]string{"--split-max-size", "1.5Q"}, `size "1.5Q"`},
		{[]string{"--split-max-tensors", "0"}, "want 1 or more"},
		{[]string{"--split-max-size", "1KB"}, "a shard would hold no tensor"},
		{[]string{"--merge"}, "not named like a shard"},
	} {
		code, _, errOut := runApp(t, append([]string{"split", splitInputs[0], "-o", out}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q", c.args, code, errOut)
		}
	}
	if got := shardFiles(t, filepath.Dir(out)); len(got) != 0 {
		t.Errorf("left %q", got)
	}
}

// quantize, convert and merge with --split-max-size write the shards that
// split --keep-dims cuts from their unsplit output, byte for byte.
func TestWritersSplit(t *testing.T) {
	for _, args := range [][]string{
		{"quantize", tiny, "--type", "Q4_K_M"},
		{"convert", "-m", tiny, "--type", "q8_0"},
		{"merge", "--base", tiny, "--lora", "../../testdata/tiny-sd1-lora.safetensors", "--type", "f16"},
	} {
		dir := t.TempDir()
		whole, cut, want := filepath.Join(dir, "whole.gguf"), filepath.Join(dir, "cut.gguf"), filepath.Join(dir, "want")
		if code, _, errOut := runApp(t, append(slices.Clone(args), "-o", whole)...); code != 0 {
			t.Fatalf("%s: %s", args[0], errOut)
		}
		code, _, errOut := runApp(t, append(slices.Clone(args), "-o", cut, "--split-max-size", "1M")...)
		if code != 0 || !strings.Contains(errOut, "sdtool split --merge") {
			t.Fatalf("%s --split-max-size: exit %d: %s", args[0], code, errOut)
		}
		if code, _, errOut := runApp(t, "split", whole, "--keep-dims", "--split-max-size", "1M", "-o", want); code != 0 {
			t.Fatal(errOut)
		}
		shards := 0
		for _, n := range shardFiles(t, dir) {
			rest, ok := strings.CutPrefix(n, "cut-")
			if !ok {
				continue
			}
			shards++
			a, err1 := os.ReadFile(filepath.Join(dir, n))
			b, err2 := os.ReadFile(filepath.Join(dir, "want-"+rest))
			if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from split's shard (%v, %v)", args[0], n, err1, err2)
			}
		}
		if shards < 2 {
			t.Errorf("%s: %d shards", args[0], shards)
		}
	}
}

// A safetensors output splits into Hugging Face shards with an index that
// opens as the unsplit file's tensors; a shard that cannot be created
// leaves nothing, index included.
func TestSafetensorsShards(t *testing.T) {
	dir := t.TempDir()
	whole, cut := filepath.Join(dir, "whole.safetensors"), filepath.Join(dir, "cut.safetensors")
	for _, out := range []string{whole, cut} {
		args := []string{"quantize", tiny, "--type", "int8", "-o", out}
		if out == cut {
			args = append(args, "--split-max-size", "1M")
		}
		if code, _, errOut := runApp(t, args...); code != 0 {
			t.Fatal(errOut)
		}
	}
	var shards []string
	for _, n := range shardFiles(t, dir) {
		if strings.HasPrefix(n, "cut-") {
			shards = append(shards, n)
			if st, err := os.Stat(filepath.Join(dir, n)); err != nil || st.Size() > 1e6+1<<17 {
				t.Errorf("%s: %v, %v", n, st.Size(), err)
			}
		}
	}
	if len(shards) < 3 || shards[0] != "cut-00001-of-00004.safetensors" {
		t.Errorf("shards %q", shards)
	}
	sameTensors(t, openModel(t, whole), openModel(t, cut+".index.json"))
	sameTensors(t, openModel(t, whole), openModel(t, filepath.Join(dir, shards[1])))

	fail := t.TempDir()
	if err := os.Mkdir(filepath.Join(fail, "x.safetensors.index.json.partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runApp(t, "quantize", tiny, "--type", "int8", "-o", filepath.Join(fail, "x.safetensors"), "--split-max-tensors", "500")
	if code != 1 || !strings.Contains(errOut, "index.json") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if got := shardFiles(t, fail); len(got) != 1 {
		t.Errorf("left %q", got)
	}
}

// A quantized file split with --keep-dims and joined with --keep-dims
// --drop-split-keys is the file again, byte for byte.
func TestSplitJoinBack(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q.gguf")
	if code, _, errOut := runApp(t, "quantize", tiny, "--type", "Q8_0", "-o", q); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := runApp(t, "split", q, "--keep-dims", "--split-max-size", "1M", "-o", filepath.Join(dir, "s")); code != 0 {
		t.Fatal(errOut)
	}
	joined := filepath.Join(dir, "j.gguf")
	first, _ := filepath.Glob(filepath.Join(dir, "s-00001-of-*.gguf"))
	if len(first) != 1 {
		t.Fatalf("shards %q", first)
	}
	if code, _, errOut := runApp(t, "split", "--merge", first[0], "--keep-dims", "--drop-split-keys", "-o", joined); code != 0 {
		t.Fatal(errOut)
	}
	sameBytes(t, "joined", q, joined)
}

// A ladder splits each rung (GGUF or safetensors) into the shards quantize
// writes for that type alone, lists them in the manifest with their
// digests, and says that sd.cpp and ComfyUI cannot load a split file.
func TestLadderSplit(t *testing.T) {
	dir, alone := t.TempDir(), t.TempDir()
	args := []string{"quantize", tiny, "--type", "Q8_0,Q4_K_M,int8", "-o", filepath.Join(dir, "t-{type}.{ext}"), "--split-max-size", "1M"}
	if code, _, errOut := runApp(t, args...); code != 0 {
		t.Fatal(errOut)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man struct {
		Files []struct {
			File, Type string
			Size       int64
			Loads      []string
			Shards     []struct {
				File   string
				Size   int64
				SHA256 string
			}
		}
	}
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	for _, f := range man.Files {
		ext := ".gguf"
		if f.Type == "int8" {
			ext = ".safetensors"
		}
		if code, _, errOut := runApp(t, "quantize", tiny, "--type", f.Type, "-o", filepath.Join(alone, "t-"+f.Type+ext), "--split-max-size", "1M"); code != 0 {
			t.Fatal(errOut)
		}
		if len(f.Shards) < 2 || f.File != f.Shards[0].File || slices.Contains(f.Loads, "sdcpp") || slices.Contains(f.Loads, "comfyui") {
			t.Errorf("%s: file %q, %d shards, loads %q", f.Type, f.File, len(f.Shards), f.Loads)
		}
		var total int64
		for _, sh := range f.Shards {
			total += sh.Size
			got, err1 := os.ReadFile(filepath.Join(dir, sh.File))
			want, err2 := os.ReadFile(filepath.Join(alone, sh.File))
			if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %s differs from quantize's shard (%v, %v)", f.Type, sh.File, err1, err2)
			}
			if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != sh.SHA256 {
				t.Errorf("%s: digest of %s", f.Type, sh.File)
			}
		}
		if total != f.Size {
			t.Errorf("%s: size %d, the shards hold %d", f.Type, f.Size, total)
		}
	}
}

// split cuts a safetensors file into Hugging Face shards and --merge joins
// them (from the index or any shard) into the same file, byte for byte.
func TestSplitSafetensors(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runApp(t, "split", tiny, "--split-max-size", "1M", "-o", filepath.Join(dir, "m.safetensors")); code != 0 {
		t.Fatal(errOut)
	}
	for _, in := range []string{"m.safetensors.index.json", "m-00003-of-00004.safetensors"} {
		joined := filepath.Join(t.TempDir(), "j.safetensors")
		if code, _, errOut := runApp(t, "split", "--merge", filepath.Join(dir, in), "-o", joined); code != 0 {
			t.Fatal(errOut)
		}
		sameBytes(t, "joined from "+in, tiny, joined)
	}
	if code, _, errOut := runApp(t, "split", tiny, "-o", filepath.Join(dir, "n")); code != 1 || !strings.Contains(errOut, "give --split-max-size") {
		t.Errorf("no limit: exit %d, %s", code, errOut)
	}
}
