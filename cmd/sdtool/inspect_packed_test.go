package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// A ComfyUI module weight stored two 4-bit values per byte counts as many
// parameters as the layer has weights, in the tensor list, the totals and
// the component, not half (it once counted [out, in/2]).
func TestInspectCountsPackedWeights(t *testing.T) {
	const w = "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.ff.net.2.weight" // a module in both formats
	src := summaryOf(t, tiny)
	for _, typ := range []string{"nvfp4", "convrot_w4a4"} {
		out := filepath.Join(t.TempDir(), typ+".safetensors")
		if code, _, errOut := runApp(t, "quantize", tiny, "--type", typ, "--convrot-group-size", "16", "-o", out); code != 0 {
			t.Fatalf("%s: %s", typ, errOut)
		}
		got := summaryOf(t, out)
		var srcN, n int64
		var shape []int64
		for _, ts := range src.Tensors {
			if ts.Name == w {
				srcN = ts.Params
			}
		}
		for _, ts := range got.Tensors {
			if ts.Name == w {
				n, shape = ts.Params, ts.Shape
			}
		}
		if n != srcN || len(shape) != 2 || 2*shape[0]*shape[1] != srcN {
			t.Errorf("%s: %s stored %v counts %d parameters, want the layer's %d", typ, w, shape, n, srcN)
		}
		if got.ParamCount < src.ParamCount || got.Architecture.Components[0].Params < src.Architecture.Components[0].Params {
			t.Errorf("%s: %d parameters (component %d), fewer than the source's %d (%d)", typ, got.ParamCount,
				got.Architecture.Components[0].Params, src.ParamCount, src.Architecture.Components[0].Params)
		}
	}
}

// summaryOf runs inspect --json on path.
func summaryOf(t *testing.T, path string) (s struct {
	ParamCount   int64 `json:"param_count"`
	Architecture struct {
		Components []struct {
			Name   string `json:"name"`
			Params int64  `json:"params"`
		} `json:"components"`
	} `json:"architecture"`
	Tensors []struct {
		Name   string  `json:"name"`
		Shape  []int64 `json:"shape"`
		Params int64   `json:"params"`
	} `json:"tensors"`
}) {
	t.Helper()
	code, out, errOut := runApp(t, "inspect", "--json", path)
	if code != 0 {
		t.Fatalf("inspect %s: %s", path, errOut)
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	return s
}
