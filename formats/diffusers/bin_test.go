package diffusers

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sdtool/sdtool/formats"
)

// writeBin writes a torch.save-style zip checkpoint holding {name: f32[2]}
// with the given 8 data bytes; the pickle is spelled out opcode by opcode.
func writeBin(t *testing.T, path string, names []string, data [][]byte) {
	t.Helper()
	pkl := []byte("\x80\x02}(")
	for i, name := range names {
		pkl = append(pkl, 'X')
		pkl = binary.LittleEndian.AppendUint32(pkl, uint32(len(name)))
		pkl = append(pkl, name...)
		pkl = append(pkl, "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"...)
		pkl = append(pkl, byte('0'+i))
		pkl = append(pkl, "X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR"...)
	}
	pkl = append(pkl, "u."...)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	add("archive/data.pkl", pkl)
	for i, d := range data {
		add("archive/data/"+string(rune('0'+i)), d)
	}
	add("archive/version", []byte("3\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, buf.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
}

// TestBin: .bin components (PyTorch checkpoints), single and sharded, are
// read through formats/ckpt; a safetensors file wins over a .bin.
func TestBin(t *testing.T) {
	dir := t.TempDir()
	d := [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 16}, {17, 18, 19, 20, 21, 22, 23, 24}}
	writeBin(t, filepath.Join(dir, "unet", "diffusion_pytorch_model.bin"), []string{"conv_in.weight", "conv_in.bias"}, d[:2])
	te := filepath.Join(dir, "text_encoder")
	writeBin(t, filepath.Join(te, "pytorch_model-00001-of-00002.bin"), []string{"a"}, d[:1])
	writeBin(t, filepath.Join(te, "pytorch_model-00002-of-00002.bin"), []string{"b"}, d[2:])
	os.WriteFile(filepath.Join(te, "pytorch_model.bin.index.json"), []byte(`{"weight_map": {"b": "pytorch_model-00002-of-00002.bin", "a": "pytorch_model-00001-of-00002.bin"}}`), 0o444)
	writeST(t, filepath.Join(dir, "vae", "diffusion_pytorch_model.safetensors"), []formats.Tensor{f32("st", 1)}, 0)
	writeBin(t, filepath.Join(dir, "vae", "diffusion_pytorch_model.bin"), []string{"bin"}, d[:1])

	m, err := formats.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := map[string][]byte{
		"unet.conv_in.weight": d[0], "unet.conv_in.bias": d[1],
		"vae.st": {0, 1, 2, 3},
		"te.b":   d[2], "te.a": d[0],
	}
	checkData(t, m, want)
	// Shards in order of first appearance in the weight_map.
	if got := names(m); !slices.Equal(got, []string{"unet.conv_in.weight", "unet.conv_in.bias", "vae.st", "te.b", "te.a"}) {
		t.Errorf("names %q", got)
	}
	if w := m.Info().Warnings; len(w) != 1 {
		t.Errorf("warnings %q, want one about the unused vae .bin", w)
	}

	// A weight_map entry that is not in its shard.
	os.Chmod(filepath.Join(te, "pytorch_model.bin.index.json"), 0o644)
	os.WriteFile(filepath.Join(te, "pytorch_model.bin.index.json"), []byte(`{"weight_map": {"a": "pytorch_model-00002-of-00002.bin", "b": "pytorch_model-00002-of-00002.bin"}}`), 0o644)
	if _, err := Open(dir); err == nil {
		t.Error("a mis-mapped tensor was accepted")
	} else if want := `tensor "a": mapped to pytorch_model-00002-of-00002.bin`; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q lacks %q", err, want)
	}
}
