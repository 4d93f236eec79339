package main

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// copyTo copies the file src to dir/name and returns the new path.
func copyTo(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// unchanged fails the test when the file at path no longer holds want.
func unchanged(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s was replaced (%d bytes, was %d)", path, len(got), len(want))
	}
}

// TestPartialSymlinkNotFollowed: a symlink planted at OUT.partial is
// neither written through nor published (issue 14, item 5).
func TestPartialSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	in := copyTo(t, "../../testdata/tiny-sd1.imatrix.dat", dir, "in.dat")
	orig, _ := os.ReadFile(in)
	victim := copyTo(t, in, dir, "victim.dat")
	out := filepath.Join(dir, "q.gguf")
	// A link to the input is refused as the input itself; a link to any
	// other file is replaced, not written through.
	if err := os.Symlink(in, out+".partial"); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, "imatrix", "convert", in, "-o", out); code == 0 || !strings.Contains(errOut, "which is input") {
		t.Fatalf("link to the input: exit %d: %s", code, errOut)
	}
	unchanged(t, in, orig)
	os.Remove(out + ".partial")
	if err := os.Symlink(victim, out+".partial"); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, "imatrix", "convert", in, "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	unchanged(t, in, orig)
	unchanged(t, victim, orig)
	if st, err := os.Lstat(out); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is not a regular file: %v %v", out, st.Mode(), err)
	}
	// imatrix merge writes through the same publish.
	merged := filepath.Join(dir, "m.dat")
	if err := os.Symlink(victim, merged+".partial"); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runApp(t, "imatrix", "merge", in, in, "-o", merged); code != 0 {
		t.Fatalf("imatrix merge: exit %d: %s", code, errOut)
	}
	unchanged(t, in, orig)
	unchanged(t, victim, orig)
	if st, err := os.Lstat(merged); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is not a regular file: %v", merged, err)
	}
}

// TestOutputsNeverReplaceInputs: with --force, no output replaces any file
// the command reads, whichever flag names it (issue 14, item 6).
func TestOutputsNeverReplaceInputs(t *testing.T) {
	dir := t.TempDir()
	model := copyTo(t, "../../testdata/tiny-sd1.safetensors", dir, "tiny-sd1.safetensors")
	tuned := copyTo(t, "../../testdata/tiny-sd1-tuned.safetensors", dir, "tuned.safetensors")
	lora := copyTo(t, "../../testdata/tiny-sd1-lora.safetensors", dir, "lora.safetensors")
	// The recipe's name has an output extension, so that only the input
	// check can refuse writing over it.
	recipe := copyTo(t, "../../testdata/merge-recipe.json", dir, "recipe.gguf")
	dat := copyTo(t, "../../testdata/tiny-sd1.imatrix.dat", dir, "im.dat")
	im := filepath.Join(dir, "im.gguf")
	if code, _, errOut := runApp(t, "imatrix", "convert", dat, "-o", im); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		victim string
		args   []string
	}{
		{im, []string{"quantize", model, "-o", im, "--type", "q4_K", "--imatrix", im}},
		{im, []string{"convert", "-m", model, "-o", im, "--type", "q4_K", "--imatrix", im}},
		{im, []string{"merge", "--base", model, "--lora", lora + ":0.5", "-o", im, "--type", "q4_K", "--imatrix", im}},
		{lora, []string{"merge", "--base", model, "--lora", lora + ":0.5", "-o", lora}},
		{recipe, []string{"merge", "--recipe", recipe, "-o", filepath.Join(dir, "graft.gguf")}}, // another name: must work
		{recipe, []string{"merge", "--recipe", recipe, "-o", recipe}},
		{tuned, []string{"lora", "extract", "--base", model, "--tuned", tuned, "--rank", "1", "-o", tuned}},
		{dat, []string{"imatrix", "merge", dat, dat, "-o", dat}},
	} {
		orig, err := os.ReadFile(tc.victim)
		if err != nil {
			t.Fatal(err)
		}
		args := append(tc.args, "--force")
		code, _, errOut := runApp(t, args...)
		out := args[len(args)-2]
		for i, a := range args {
			if a == "-o" {
				out = args[i+1]
			}
		}
		if out != tc.victim {
			if code != 0 {
				t.Errorf("%s: exit %d: %s", strings.Join(tc.args, " "), code, errOut)
			}
			continue
		}
		if code == 0 || !strings.Contains(errOut, "refusing to write over input") {
			t.Errorf("%s: exit %d: %s", strings.Join(tc.args, " "), code, errOut)
		}
		unchanged(t, tc.victim, orig)
	}
}

// pngHeader returns a grayscale PNG that declares w x h pixels but holds
// only a few rows of zeros: what a decompression bomb's header says.
func pngHeader(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(b, typ...)
		b = append(b, data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 0, 0, 0, 0) // 8-bit grayscale
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 4*(int(w)+1)))
	zw.Close()
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", z.Bytes())...)
	return append(b, chunk("IEND", nil)...)
}

// TestInitImageBomb: an init image is refused from its header when it
// declares more pixels than the stated limit (issue 14, item 4).
func TestInitImageBomb(t *testing.T) {
	dir := t.TempDir()
	for _, sz := range [][2]uint32{{5000, 5000}, {20000, 20000}, {1, 1 << 31 / 2}} {
		p := filepath.Join(dir, "bomb.png")
		if err := os.WriteFile(p, pngHeader(sz[0], sz[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		_, err := readPNG(p)
		runtime.ReadMemStats(&b)
		if err == nil || !strings.Contains(err.Error(), "at most 16777216 pixels") || !strings.Contains(err.Error(), p) {
			t.Errorf("%dx%d: %v", sz[0], sz[1], err)
		}
		if n := b.TotalAlloc - a.TotalAlloc; n > 1<<20 {
			t.Errorf("%dx%d: %d bytes allocated before refusing", sz[0], sz[1], n)
		}
	}
	p := filepath.Join(dir, "small.png")
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 8, 8))); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, buf.Bytes(), 0o644)
	if img, err := readPNG(p); err != nil || img.Bounds().Dx() != 8 {
		t.Errorf("8x8 image: %v", err)
	}
}

// hostileNames is a safetensors file whose tensor name and metadata key
// carry terminal escapes (retitle, clear screen) and a NUL.
func hostileNames(t *testing.T, dir string) string {
	t.Helper()
	hdr := `{"__metadata__":{"k\u001b]0;pwned\u0007":"v\u001b[2J"},"a\u001b[2J\u0000b\u009b31m":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(append(b, hdr...), 0, 0, 128, 63)
	p := filepath.Join(dir, "names.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestControlCharactersEscaped: inspect and diff print names and keys with
// their control characters escaped, and no writer stores a NUL in a name
// (issue 14, item 12).
func TestControlCharactersEscaped(t *testing.T) {
	dir := t.TempDir()
	p := hostileNames(t, dir)
	q := copyTo(t, p, dir, "names2.safetensors")
	for _, args := range [][]string{{"inspect", p}, {"inspect", p, "--filter", "a"}, {"diff", p, q}} {
		code, out, errOut := runApp(t, args...)
		if code != 0 && args[0] == "inspect" {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		for _, s := range []string{out, errOut} {
			if strings.ContainsAny(s, "\x1b\x07\x00\u009b") {
				t.Errorf("%v: raw control characters in %q", args, s)
			}
		}
		if !strings.Contains(out, `\x1b`) {
			t.Errorf("%v: no escaped name in %q", args, out)
		}
	}
	for _, args := range [][]string{
		{"quantize", p, "-o", filepath.Join(dir, "n.gguf"), "--type", "f16"},
		{"convert", "-m", p, "-o", filepath.Join(dir, "n.safetensors")},
	} {
		code, _, errOut := runApp(t, args...)
		if code == 0 || !strings.Contains(errOut, "NUL") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// f32File writes a safetensors file of one-dimensional f32 tensors.
func f32File(t *testing.T, path string, tensors map[string][]float32, order []string) {
	t.Helper()
	f32Matrices(t, path, tensors, order, 0)
}

// f32Matrices writes a safetensors file of f32 tensors, with rows of cols
// elements (one dimension when cols is 0).
func f32Matrices(t *testing.T, path string, tensors map[string][]float32, order []string, cols int) {
	t.Helper()
	hdr, off := "{", 0
	var data []byte
	for i, name := range order {
		v := tensors[name]
		if i > 0 {
			hdr += ","
		}
		shape := fmt.Sprint(len(v))
		if cols > 0 {
			shape = fmt.Sprintf("%d,%d", len(v)/cols, cols)
		}
		hdr += fmt.Sprintf("%q:{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%d,%d]}", name, shape, off, off+4*len(v))
		off += 4 * len(v)
		for _, x := range v {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(x))
		}
	}
	hdr += "}"
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	if err := os.WriteFile(path, append(append(b, hdr...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDiffNonFiniteIsWorst: a tensor whose values became NaN or Inf ranks
// first, with undefined measures, not as a perfect match (issue 14, item 11).
func TestDiffNonFiniteIsWorst(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	order := []string{"nan", "small", "inf"}
	f32File(t, a, map[string][]float32{"nan": {1, 2, 3, 4}, "small": {1, 2, 3, 4}, "inf": {0, 0, 0, 0}}, order)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	f32File(t, b, map[string][]float32{"nan": {nan, nan, nan, nan}, "small": {1, 2, 3, 4.5}, "inf": {0, inf, 0, 0}}, order)
	code, out, errOut := runApp(t, "diff", a, b, "--json")
	if code > 1 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Tensors []struct {
			Name           string   `json:"name"`
			RelError       *float64 `json:"rel_error"`
			NonFiniteDiffs int64    `json:"non_finite_diffs"`
		} `json:"tensors"`
		Totals struct {
			RelError *float64 `json:"rel_error"`
			Worst    string   `json:"worst"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err, out)
	}
	if len(r.Tensors) != 3 || r.Tensors[0].Name != "nan" || r.Tensors[1].Name != "inf" || r.Tensors[0].RelError != nil || r.Tensors[0].NonFiniteDiffs != 4 {
		t.Errorf("order or measures: %s", out)
	}
	if r.Totals.RelError != nil || r.Totals.Worst != "nan" {
		t.Errorf("totals: %s", out)
	}
	_, text, _ := runApp(t, "diff", a, b)
	if !strings.Contains(text, "non-finite (4)") || strings.Contains(text, "relative error 0.0") {
		t.Errorf("text: %s", text)
	}
}

// TestQuantizeReportsNonFinite: huge finite weights that q8_0 turns into
// Inf, and NaN inputs, are reported per tensor with counts, and --strict
// refuses the output (issue 14, item 11).
func TestQuantizeReportsNonFinite(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	huge, nan, fine := make([]float32, 256), make([]float32, 256), make([]float32, 256)
	for i := range huge {
		huge[i] = 3e38 * float32(1-2*(i%2))
		nan[i] = float32(i%7) / 7
		fine[i] = float32(i%5) / 5
	}
	nan[40] = float32(math.NaN())
	f32Matrices(t, in, map[string][]float32{"huge.weight": huge, "nan.weight": nan, "fine.weight": fine},
		[]string{"fine.weight", "huge.weight", "nan.weight"}, 64)
	out := filepath.Join(dir, "o.gguf")
	code, _, errOut := runApp(t, "quantize", in, "-o", out, "--type", "q8_0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"huge.weight", "finite_made_non_finite=256", "nan.weight", "non_finite_inputs=1"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("no %q in %s", want, errOut)
		}
	}
	if strings.Contains(errOut, "fine.weight") {
		t.Errorf("a clean tensor was reported: %s", errOut)
	}
	out2 := filepath.Join(dir, "o2.gguf")
	code, _, errOut = runApp(t, "quantize", in, "-o", out2, "--type", "q8_0", "--strict")
	if code == 0 || !strings.Contains(errOut, `refused for non-finite values in tensor "huge.weight"`) {
		t.Errorf("--strict: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(out2); err == nil {
		t.Error("--strict left an output")
	}
}

// TestImatrixConvertRefusesBadValues: NaN, infinite or negative values
// are refused, naming the file and entry, not written on (issue 14, item 13).
func TestImatrixConvertRefusesBadValues(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), -2} {
		b := []byte{1, 0, 0, 0, 1, 0, 0, 0, 'x', 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 128, 63}
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		in := filepath.Join(dir, "bad.dat")
		if err := os.WriteFile(in, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"imatrix", "convert", in}, {"imatrix", "merge", in, in}} {
			out := filepath.Join(dir, "o.gguf")
			code, _, errOut := runApp(t, append(args, "-o", out, "--force")...)
			if code == 0 || !strings.Contains(errOut, in) || !strings.Contains(errOut, `entry "x"`) {
				t.Errorf("%v with %v: exit %d: %s", args, v, code, errOut)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%v with %v: output written", args, v)
				os.Remove(out)
			}
		}
	}
}
