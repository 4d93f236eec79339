package synth

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
)

// RealList is one committed tensor list of a published model (the
// testdata/headers folder: one gzipped name a line, a tab and the dims
// where the source gives them), with what sdtool must find in it. The
// layouts in this package are tested against these lists, and detection
// and the quantizer's keep lists are tested on them.
type RealList struct {
	// File is the list's file name in the folder.
	File string `json:"file"`
	// Tensors is the number of names in it.
	Tensors int `json:"tensors"`
	// Shapes are dims that the source repository publishes beside a
	// names-only list (its config.json: vocabulary, widths, channels).
	Shapes map[string][]int64 `json:"shapes,omitempty"`
	// Meta is metadata for variants only metadata tells apart.
	Meta map[string]string `json:"meta,omitempty"`
	// Family, Variant and Components are what detection must find (the
	// components' family IDs in file order; empty: not checked).
	Family     string   `json:"family"`
	Variant    string   `json:"variant"`
	Components []string `json:"components,omitempty"`
	// Unassigned is how many tensors belong to no component (a
	// checkpoint's noise-schedule buffers).
	Unassigned int `json:"unassigned,omitempty"`
	// Keep are tensors a quantized file keeps in high precision, Quantized
	// ones a mix quantizes.
	Keep      []string `json:"keep,omitempty"`
	Quantized []string `json:"quantized,omitempty"`
	// Layout is the synthetic layout whose names must all occur in the
	// list once block numbers are folded, under LayoutPrefix.
	Layout       string `json:"layout,omitempty"`
	LayoutPrefix string `json:"layout_prefix,omitempty"`
}

// ReadRealLists reads dir's cases.json: the committed lists and what must
// be found in each.
func ReadRealLists(dir string) ([]RealList, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		return nil, err
	}
	var out []RealList
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "cases.json"), err)
	}
	return out, nil
}

// Descriptors reads the list's tensors from dir. A tensor without dims in
// the list takes them from Shapes or else a stand-in: 1-D for biases,
// norms and scalars, 256x256 otherwise, so that a names-only list still
// exercises name-based detection and keep lists. Types are F16; Size is
// set.
func (l RealList) Descriptors(dir string) ([]formats.Tensor, error) {
	path := filepath.Join(dir, l.File)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []formats.Tensor
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		name, dims, _ := strings.Cut(sc.Text(), "\t")
		t := formats.Tensor{Name: name, Type: formats.F16}
		switch {
		case dims != "":
			for _, d := range strings.Split(dims, ",") {
				n, err := strconv.ParseInt(d, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: tensor %s: bad dim %q", path, name, d)
				}
				t.Shape = append(t.Shape, n)
			}
		case l.Shapes[name] != nil:
			t.Shape = l.Shapes[name]
		case oneD.MatchString(name):
			t.Shape = []int64{256}
		default:
			t.Shape = []int64{256, 256}
		}
		t.Size = t.Elements() * 2
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) != l.Tensors {
		return nil, fmt.Errorf("%s: %d tensors, cases.json says %d", path, len(out), l.Tensors)
	}
	return out, nil
}

// oneD matches the names whose tensors are vectors in every family: biases,
// norm and RMS-norm scales, Wan's modulation and a few scalars.
var oneD = regexp.MustCompile(`(\.bias|norm[^.]*\.weight|norm[^.]*\.scale|\.scale|_bias|logit_scale|position_ids|\.gamma)$`)

// blockNum matches a block number between dots.
var blockNum = regexp.MustCompile(`\.\d+\.`)

// FoldBlocks replaces every block number in name by "N" (a name pattern:
// "blocks.3.attn.q.weight" and "blocks.0.attn.q.weight" both fold to
// "blocks.N.attn.q.weight").
func FoldBlocks(name string) string {
	for {
		n := blockNum.ReplaceAllString(name, ".N.")
		if n == name {
			return n
		}
		name = n
	}
}
