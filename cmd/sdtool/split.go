package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/formats/safetensors"
	"github.com/sdtool/sdtool/pipeline"
)

// splitFlags are the flags that cut an output into shards, shared by
// split, quantize, convert and merge.
func splitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "split-max-size", Usage: "write shards of at most `SIZE` of tensor data: a split GGUF, or safetensors shards with an index (4G = 4e9 bytes and 500M = 5e8 as in llama.cpp's gguf-split; 4GiB, 4GB, bytes too)"},
		&cli.IntFlag{Name: "split-max-tensors", Usage: "write shards of at most `N` tensors (a split GGUF, or safetensors shards with an index)"},
	}
}

// gguf-split reads "4G" and "500M" as whole decimal gigabytes and megabytes.
var splitSizeSyntax = regexp.MustCompile(`^([0-9]+)([MG])$`)

// splitLimits reads --split-max-size and --split-max-tensors (one of them
// at most, as in gguf-split); the zero limits mean no split.
func splitLimits(c *cli.Context) (gguf.SplitLimits, error) {
	var l gguf.SplitLimits
	size, n := c.String("split-max-size"), c.Int("split-max-tensors")
	if size != "" && c.IsSet("split-max-tensors") {
		return l, fmt.Errorf("--split-max-size and --split-max-tensors: give one or the other, as gguf-split takes")
	}
	if c.IsSet("split-max-tensors") && n <= 0 {
		return l, fmt.Errorf("--split-max-tensors %d: want 1 or more", n)
	}
	l.MaxTensors = n
	if size == "" {
		return l, nil
	}
	if m := splitSizeSyntax.FindStringSubmatch(size); m != nil {
		v, err := strconv.ParseInt(m[1], 10, 64)
		unit := int64(1e6)
		if m[2] == "G" {
			unit = 1e9
		}
		if err != nil || v <= 0 || v > (1<<62)/unit {
			return l, fmt.Errorf("--split-max-size %s: want a positive size", size)
		}
		l.MaxBytes = v * unit
		return l, nil
	}
	b, err := pipeline.ParseBytes(size)
	if err != nil {
		return l, fmt.Errorf("--split-max-size: %v", err)
	}
	if b <= 0 {
		return l, fmt.Errorf("--split-max-size %s: want more than 0 bytes", size)
	}
	l.MaxBytes = b
	return l, nil
}

func init() {
	flags := append(splitFlags(),
		&cli.BoolFlag{Name: "merge", Usage: "join the split GGUF that IN belongs to into one file (-o)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "split: the shards' `PATH` prefix (OUT or OUT.gguf gives OUT-00001-of-0000N.gguf; default IN without .gguf); --merge: the output file"},
		&cli.BoolFlag{Name: "no-tensor-first-split", Usage: "give the first shard the metadata and no tensor"},
		&cli.BoolFlag{Name: "drop-split-keys", Usage: "--merge: leave out the split.* keys, so that joining the shards of a file (split with --keep-dims) gives that file back byte for byte"},
		&cli.BoolFlag{Name: "keep-dims", Usage: "keep stored dims of 1 that gguf-split drops (torch [1, 320] stays [1, 320]; the bytes then differ from gguf-split's)"},
		threadsFlag("`N` threads reading and writing"),
		maxMemoryFlag(),
		&cli.BoolFlag{Name: "force", Usage: "replace existing outputs"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print the shards (or the merged tensors) and write nothing"},
	)
	register(&cli.Command{
		Name:      "split",
		Usage:     "split a GGUF into shards or join them, byte for byte as llama.cpp's gguf-split (safetensors too)",
		ArgsUsage: "IN",
		Description: "Writes the split GGUF that llama.cpp's gguf-split --split writes for the same input and flags:\n" +
			"shards NAME-00001-of-0000N.gguf, the first holding every metadata key, each holding split.no,\n" +
			"split.count and split.tensors.count, a shard ending before the tensor that would take its tensor\n" +
			"data over --split-max-size (the header not counted) or at every --split-max-tensors tensors\n" +
			"(128 when neither is given, as in gguf-split). --merge joins the split GGUF that IN (any shard)\n" +
			"belongs to into one file as gguf-split --merge does: the first shard's metadata with split.count\n" +
			"0, then every tensor; --drop-split-keys leaves the split keys out. Like gguf-split, both drop\n" +
			"stored dims of 1 past the first (ggml_n_dims); --keep-dims keeps them (ComfyUI-GGUF reads a\n" +
			"tensor's shape from them unless comfy.gguf.orig_shape says otherwise), so that a file split and\n" +
			"joined with --keep-dims --drop-split-keys is that file again. Tensor data is copied, never\n" +
			"decoded. Every shard is written as NAME.partial and renamed only when all are complete; on any\n" +
			"failure none is left. A safetensors IN is cut into Hugging Face shards (NAME-00001-of-0000N.safetensors\n" +
			"and NAME.safetensors.index.json; give a limit), and --merge joins them from the index or any shard.\n" +
			"quantize, convert and merge take --split-max-size and --split-max-tensors too.",
		Flags:  flags,
		Action: runSplitCmd,
	},
		"sdtool split testdata/tiny-sd1.gguf --split-max-size 1M -o out/tiny-sd1 --force",
		"sdtool split --merge out/tiny-sd1-00001-of-00004.gguf -o out/tiny-sd1-joined.gguf --force",
		"sdtool split testdata/tiny-sd1.gguf --split-max-tensors 100 --dry-run",
	)
}

func runSplitCmd(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("split: want one input GGUF or safetensors file (see sdtool split --help)")
	}
	in := c.Args().First()
	lim, err := splitLimits(c)
	if err != nil {
		return err
	}
	if c.Bool("merge") {
		if lim.Active() || c.Bool("no-tensor-first-split") {
			return fmt.Errorf("split --merge: --split-max-size, --split-max-tensors and --no-tensor-first-split cut shards, not a merge")
		}
		return runJoin(c, in)
	}
	if !lim.Active() {
		lim.MaxTensors = 128 // gguf-split's default
	}
	lim.NoTensorsFirst = c.Bool("no-tensor-first-split")
	if c.Bool("drop-split-keys") {
		return fmt.Errorf("split: --drop-split-keys is for --merge")
	}
	out := c.String("output")
	if out == "" {
		out = in
		if _, _, _, ok := gguf.ParseSplitPath(in); ok || safetensors.IsShardName(in) || safetensors.IsIndex(in) {
			return fmt.Errorf("split: %s is a shard or an index: name the new shards with -o", in)
		}
	}
	m, err := formats.Open(in)
	if err != nil {
		return err
	}
	var plan *pipeline.Plan
	switch m.Info().Format {
	case "gguf":
		plan = copyPlan(m, gguf.SplitPrefix(out)+".gguf", gguf.StripSplitKeys(m.Metadata()), !c.Bool("keep-dims"))
	case "safetensors":
		if !c.IsSet("split-max-size") && !c.IsSet("split-max-tensors") {
			m.Close()
			return fmt.Errorf("split: %s: give --split-max-size or --split-max-tensors for safetensors shards", in)
		}
		plan = copyPlan(m, strings.TrimSuffix(out, ".safetensors")+".safetensors", m.Metadata(), false)
	default:
		m.Close()
		return fmt.Errorf("split: %s is %s: GGUF and safetensors files are split", in, m.Info().Format)
	}
	plan.Split = lim
	return writeSplitPlan(c, plan, "split")
}

// runJoin joins the split GGUF that in belongs to, as gguf-split --merge,
// or the safetensors shards of an index (or of any shard) into one file.
func runJoin(c *cli.Context, in string) error {
	out := c.String("output")
	if out == "" {
		return fmt.Errorf("split --merge: name the joined file with -o")
	}
	if safetensors.IsIndex(in) || safetensors.IsShardName(in) {
		m, err := safetensors.OpenSharded(in)
		if err != nil {
			return err
		}
		return writeSplitPlan(c, copyPlan(m, out, m.Metadata(), false), "merge")
	}
	if _, _, _, ok := gguf.ParseSplitPath(in); !ok {
		return fmt.Errorf("split --merge: %s is not named like a shard (NAME-00001-of-00003.gguf) or an index.json", in)
	}
	m, err := gguf.OpenSplit(in)
	if err != nil {
		return err
	}
	meta := m.Metadata()
	if _, ok := meta.Get(gguf.SplitCountKey); !ok {
		m.Close()
		return fmt.Errorf("%s: no %s key: not a shard written by gguf-split", m.Info().Files[0], gguf.SplitCountKey)
	}
	meta = gguf.MergeMetadata(meta)
	if c.Bool("drop-split-keys") {
		meta = gguf.StripSplitKeys(meta)
	}
	plan := copyPlan(m, out, meta, !c.Bool("keep-dims"))
	return writeSplitPlan(c, plan, "merge")
}

// copyPlan is a plan that copies every tensor of m into out, in m's
// format, with metadata meta; a GGUF with gguf-split's layout, dims
// trimmed as ggml's writer trims them when trim is set.
func copyPlan(m formats.Model, out string, meta formats.Metadata, trim bool) *pipeline.Plan {
	creator, _ := formats.CreatorNamed(m.Info().Format)
	plan := &pipeline.Plan{
		Path:   out,
		Format: creator,
		Header: formats.WriteOptions{Metadata: meta, TrimDims: trim, PadEnd: true},
	}
	plan.Use(m)
	for _, t := range m.Tensors() {
		plan.Outputs = append(plan.Outputs, pipeline.Output{
			Name: t.Name, Type: t.Type, Shape: t.Shape, Producer: pipeline.Copy(m, t), Source: &t, Note: "copied",
		})
	}
	if n := trimNote(plan, "as gguf-split stores them (--keep-dims keeps them)"); n != "" {
		plan.Notes = append(plan.Notes, n)
	}
	return plan
}

// trimNote says which tensors a plan that trims dims (ggml_n_dims) stores
// without their leading dims of 1, and why; "" when none. ComfyUI-GGUF
// reads a tensor's torch shape from the stored dims, so such a file fails
// there for the families that have such tensors (Z-Image's pad tokens, Wan's
// modulation, SD3's pos_embed: docs/load-table.md).
func trimNote(plan *pipeline.Plan, why string) string {
	if !plan.Header.TrimDims {
		return ""
	}
	var changed []string
	for _, o := range plan.Outputs {
		if len(o.Shape) > 1 && o.Shape[0] == 1 {
			changed = append(changed, fmt.Sprintf("%q %s", o.Name, formats.FormatShape(o.Shape)))
		}
	}
	if len(changed) == 0 {
		return ""
	}
	more := ""
	if len(changed) > 3 {
		more = fmt.Sprintf(" and %d more", len(changed)-3)
	}
	return fmt.Sprintf("note: %s stored without leading dims of 1, %s; ComfyUI-GGUF reads the stored dims as the torch shape: %s%s",
		pipeline.Count(len(changed), "tensor", "tensors"), why, strings.Join(changed[:min(3, len(changed))], ", "), more)
}

// writeSplitPlan writes plan (or prints it for --dry-run).
func writeSplitPlan(c *cli.Context, plan *pipeline.Plan, label string) error {
	defer plan.Close()
	return writePlan(c, plan, label, nil)
}
