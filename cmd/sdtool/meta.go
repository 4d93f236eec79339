package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/inspect"
	"github.com/sdtool/sdtool/pipeline"
)

func init() {
	register(&cli.Command{
		Name:      "meta",
		Usage:     "show or edit the metadata of a GGUF or safetensors file, copying the tensor data",
		ArgsUsage: "FILE",
		Description: "Without edits, prints every metadata key of FILE with its type and value (long values shortened as\n" +
			"inspect shortens them). With --set, --delete, --rename-tensor or --architecture it writes the file\n" +
			"again to -o OUT, or over FILE with --in-place, with the tensor data copied byte for byte (never\n" +
			"decoded), the keys edited where they stand (a new key goes last), tensors in their order with their\n" +
			"stored shapes, and a GGUF's alignment kept: -o writes what llama.cpp's gguf_new_metadata.py writes\n" +
			"for the same edit (general.architecture first, the data padded to the end), and --in-place keeps\n" +
			"the file's key order and layout, so an in-place --set of a number leaves what gguf_set_metadata.py\n" +
			"leaves. --set takes the existing key's type, or --type, or string. A safetensors\n" +
			"__metadata__ holds strings only. --shape NAME=1,3840 stores a tensor with other dims (same elements),\n" +
			"the fix for a file sd-cli wrote whose [1, C] tensors ComfyUI-GGUF would read as [C]\n" +
			"(docs/load-table.md). --in-place writes FILE.partial and renames it over FILE only when\n" +
			"complete, so FILE is intact after any failure; it needs free space for a second copy.",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "set", Usage: "set `KEY=VALUE` (repeatable): the key keeps its place and type, a new key goes last"},
			&cli.StringFlag{Name: "type", Usage: "value `TYPE` of every --set: u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool or string", DefaultText: "the key's, or string"},
			&cli.StringSliceFlag{Name: "delete", Usage: "remove `KEY` (repeatable)"},
			&cli.StringSliceFlag{Name: "rename-tensor", Usage: "rename tensor `OLD=NEW` (repeatable; its comfy.gguf.orig_shape key follows)"},
			&cli.StringSliceFlag{Name: "shape", Usage: "store tensor `NAME=D0,D1,...` with these dims (PyTorch order, same element count; repeatable): [1,3840] where sd-cli stored [3840]"},
			&cli.StringFlag{Name: "architecture", Usage: "set general.architecture to `NAME` (ComfyUI-GGUF refuses names it does not know)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the edited file to `OUT` (same format as FILE)"},
			&cli.BoolFlag{Name: "in-place", Usage: "replace FILE with the edited file (atomically)"},
			threadsFlag("`N` threads copying"),
			maxMemoryFlag(),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing OUT"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the edited keys and write nothing"},
		},
		Action: runMeta,
	},
		"sdtool meta testdata/tiny-sd1.gguf",
		"sdtool meta testdata/tiny-sd1.gguf --architecture sd1 --set general.name=tiny --set sdtool.generate.steps=8 --delete sdtool.prediction -o out/tiny-edited.gguf --force",
		"sdtool meta out/tiny-edited.gguf --set sdtool.generate.steps=2 --in-place",
		"sdtool meta testdata/tiny-sd1.safetensors --set general.name=tiny --rename-tensor cond_stage_model.transformer.text_model.final_layer_norm.weight=cond_stage_model.final_ln.weight -o out/tiny-edited.safetensors --force",
	)
}

func runMeta(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("meta: want one FILE (see sdtool meta --help)")
	}
	in := c.Args().First()
	m, err := formats.Open(in)
	if err != nil {
		return err
	}
	defer m.Close()
	edit, err := metaEdit(c, m)
	if err != nil {
		return err
	}
	out, inPlace := c.String("output"), c.Bool("in-place")
	if len(edit.Set)+len(edit.Delete)+len(edit.Rename)+len(edit.Reshape) == 0 {
		if out != "" || inPlace {
			return fmt.Errorf("meta: -o and --in-place write an edit: give --set, --delete, --rename-tensor, --shape or --architecture")
		}
		s, err := inspect.Summarize(m, inspect.Options{NoTensors: true})
		if err != nil {
			return err
		}
		return inspect.WriteMetadata(c.App.Writer, s)
	}
	switch {
	case inPlace && out != "":
		return fmt.Errorf("meta: -o and --in-place: give one")
	case inPlace && len(m.Info().Files) > 1:
		return fmt.Errorf("meta: %s is one of %d files: --in-place edits a single file (write the edit with -o)", in, len(m.Info().Files))
	case inPlace:
		out, edit.KeepLayout = in, true
	case out == "":
		return fmt.Errorf("meta: name the edited file with -o, or use --in-place")
	}
	plan, err := pipeline.EditPlan(m, out, edit)
	if err != nil {
		return err
	}
	if c.Bool("dry-run") {
		s, err := inspect.Summarize(editedView{m, plan.Header.Metadata}, inspect.Options{NoTensors: true})
		if err != nil {
			return err
		}
		if err := inspect.WriteMetadata(c.App.Writer, s); err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.App.Writer, "nothing written (--dry-run)")
		return err
	}
	if !inPlace {
		return writePlan(c, plan, "meta", nil)
	}
	return writeInPlace(c, plan, in)
}

// editedView is a model with other metadata, for printing an edit.
type editedView struct {
	formats.Model
	meta formats.Metadata
}

// Metadata returns the edited metadata.
func (e editedView) Metadata() formats.Metadata { return e.meta }

// metaEdit reads the edit flags; --set takes the existing key's type
// unless --type names one.
func metaEdit(c *cli.Context, m formats.Model) (pipeline.MetaEdit, error) {
	var e pipeline.MetaEdit
	var forced *formats.ValueType
	if s := c.String("type"); s != "" {
		t, err := pipeline.ParseValueType(s)
		if err != nil {
			return e, fmt.Errorf("--type: %v", err)
		}
		forced = &t
	}
	sets := c.StringSlice("set")
	if a := c.String("architecture"); a != "" {
		sets = append(sets, "general.architecture="+a)
	}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return e, fmt.Errorf("--set %q: want KEY=VALUE", s)
		}
		t := formats.TypeString
		if old, ok := m.Metadata().Get(k); ok {
			t = old.Type
		}
		if forced != nil && !strings.HasPrefix(s, "general.architecture=") {
			t = *forced
		}
		val, err := pipeline.ParseValue(t, v)
		if err != nil {
			return e, fmt.Errorf("--set %s: %v (--type names another type)", k, err)
		}
		e.Set = append(e.Set, formats.KV{Key: k, Type: t, Value: val})
	}
	e.Delete = c.StringSlice("delete")
	for _, r := range c.StringSlice("shape") {
		name, dims, ok := strings.Cut(r, "=")
		shape, err := parseDims(dims)
		if !ok || name == "" || err != nil {
			return e, fmt.Errorf("--shape %q: want NAME=D0,D1,... (PyTorch order)", r)
		}
		if e.Reshape == nil {
			e.Reshape = map[string][]int64{}
		}
		e.Reshape[name] = shape
	}
	for _, r := range c.StringSlice("rename-tensor") {
		old, neu, ok := strings.Cut(r, "=")
		if !ok || old == "" || neu == "" {
			return e, fmt.Errorf("--rename-tensor %q: want OLD=NEW", r)
		}
		e.Rename = append(e.Rename, [2]string{old, neu})
	}
	return e, nil
}

// writeInPlace writes plan over in: in is read while in.partial is
// written, then closed, and the publish renames in.partial over in only
// when complete. (Linux renames over an open file, the reader keeping the
// old one; Windows refuses while a handle is open without delete sharing,
// which Go's os.Open does not ask for.)
func writeInPlace(c *cli.Context, plan *pipeline.Plan, in string) error {
	ro, err := runOptions(c)
	if err != nil {
		return err
	}
	ro.Force, ro.ReleaseInputs = true, true
	var inputs []string
	for _, p := range plan.Inputs {
		if !pipeline.SameFile(p, in) {
			inputs = append(inputs, p)
		}
	}
	plan.Inputs = inputs
	ctx, stop := console.SignalContext()
	defer stop()
	bar := console.New("meta", 0)
	ro.Progress = bar.Update
	if err := pipeline.Run(ctx, plan, ro); err != nil {
		bar.Abandon()
		return err
	}
	bar.Finish()
	fmt.Fprint(c.App.ErrWriter, "wrote ")
	return plan.WriteSummary(c.App.ErrWriter)
}

// parseDims reads "1,3840" as a shape.
func parseDims(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("dim %q", f)
		}
		out = append(out, d)
	}
	return out, nil
}
