package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/merge"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
)

func init() {
	register(&cli.Command{
		Name:      "merge",
		Usage:     "graft tensors by rules (--recipe), merge models arithmetically (--method), or bake LoRAs into a model (--base --lora)",
		ArgsUsage: "--recipe RECIPE.json -o OUT | --method METHOD -a A -b B [-c C] -o OUT | --base MODEL --lora FILE[:STRENGTH]... -o OUT [--type T]",
		Description: "Recipe merge: each source of RECIPE.json (see docs/merge-recipe.md) contributes the tensors that match\n" +
			"one of its include regexes and none of its exclude regexes (unanchored searches on the source's own\n" +
			"names; use ^ and $ to anchor), renamed by strip_prefix, rename and prefix. An output name selected\n" +
			"twice, a source that selects nothing, or a bad field is an error and nothing is written. Data is\n" +
			"copied byte for byte; ggml-quantized tensors go into .safetensors only with --dtype f32|f16|bf16,\n" +
			"which decodes them. Relative source paths are relative to the recipe's directory.\n\n" +
			"Arithmetic merge (computed in f32, tensor by tensor, A's tensor order and names):\n" +
			"   weighted_sum    (1-alpha)*A + alpha*B                      (default alpha 0.5)\n" +
			"   add_difference  A + alpha*(B - C)                          (default alpha 1)\n" +
			"   ties            A + alpha*TIES(B-A [, C-A]): keep each delta's top --density by magnitude,\n" +
			"                   elect the sign of their sum, average the deltas with that sign (default 1)\n" +
			"   dare            A + alpha*mean(drop(B-A) [, drop(C-A)]): drop each delta element with\n" +
			"                   probability --drop-p (seeded, the same for any thread count), rescale by 1/(1-p)\n" +
			"   slerp           spherical interpolation of A and B as flat vectors; lerp when nearly colinear\n" +
			"--alpha-rules \"REGEX=ALPHA,...\" sets alpha per tensor (the first match wins) for block-weighted\n" +
			"merges. Output types follow A unless --type (any ggml or float type; block types apply to 2-D+\n" +
			"tensors whose rows are whole blocks). Tensors missing from B or C, or with another shape, are\n" +
			"errors unless --allow-missing (A's tensor is copied). Integer tensors are copied from A.\n\n" +
			"LoRA bake (--base MODEL --lora FILE[:STRENGTH], repeatable; strength 1 by default): adds each adapter's\n" +
			"delta (strength x alpha/rank x up.down; LoCon, LoHa, LoKr, full diffs and DoRA too; kohya, PEFT,\n" +
			"diffusers, LyCORIS, ComfyUI and sd.cpp names, Flux qkv split or joined as the base needs) in f32 to\n" +
			"the base's weights (ggml-quantized and ComfyUI quantized bases are dequantized first), streamed: only\n" +
			"the tensors being written and the factors of the layers changing them are in memory. Adapter keys\n" +
			"that change no base tensor are listed and are an error unless --allow-unmatched; a delta that does not\n" +
			"fit its tensor names both. Without --type every tensor keeps the base's type (a ComfyUI quantized\n" +
			"layer becomes its dequantized f32 weight); --type f32|f16|bf16 into .safetensors converts every float\n" +
			"tensor; any other --type is one of sdtool quantize's types or mixes, quantized in the same pass exactly\n" +
			"as quantize would quantize the baked model (GGUF, or ComfyUI int8/fp8 safetensors), with --imatrix,\n" +
			"--tensor-type, --tensor-type-rules and --pure.\n" +
			"--dry-run lists which tensors each adapter changes, then the plan.\n\n" +
			"All three write OUT (.safetensors or .gguf, by extension) as OUT.partial and rename it when complete;\n" +
			"an existing OUT needs --force, and OUT can never be an input.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "recipe", Usage: "recipe `FILE` (JSON) for a rule-based merge"},
			&cli.StringFlag{Name: "method", Usage: "arithmetic `METHOD`: weighted_sum, add_difference, ties, dare or slerp"},
			&cli.StringFlag{Name: "a", Usage: "model `A` (the base of ties and dare)"},
			&cli.StringFlag{Name: "b", Usage: "model `B`"},
			&cli.StringFlag{Name: "c", Usage: "model `C` (add_difference; optional second fine-tune for ties and dare)"},
			&cli.Float64Flag{Name: "alpha", Usage: "global `ALPHA`", DefaultText: "0.5 for weighted_sum and slerp, 1 otherwise"},
			&cli.StringFlag{Name: "alpha-rules", Usage: "per-tensor alpha `RULES` \"REGEX=ALPHA,...\" (the first match wins)"},
			&cli.Float64Flag{Name: "density", Value: merge.DefaultDensity, Usage: "ties: fraction `D` of each delta kept"},
			&cli.Float64Flag{Name: "drop-p", Value: merge.DefaultDropP, Usage: "dare: drop probability `P`"},
			&cli.Int64Flag{Name: "seed", Usage: "dare: random `SEED`"},
			&cli.StringFlag{Name: "dtype", Aliases: []string{"type"}, Usage: "output `TYPE`: recipe: f32, f16 or bf16 for ggml-quantized tensors; arithmetic: any type; lora: f32, f16, bf16 or any type or mix of sdtool quantize"},
			&cli.StringFlag{Name: "base", Usage: "lora: the `MODEL` the adapters are baked into"},
			&cli.StringSliceFlag{Name: "lora", Usage: "lora: adapter `FILE[:STRENGTH]` (repeatable; applied in order)"},
			&cli.BoolFlag{Name: "allow-unmatched", Usage: "lora: bake what matches when some adapter keys change no base tensor"},
			&cli.StringSliceFlag{Name: "imatrix", Usage: "lora with a quantized --type: importance matrix `FILE` (.dat or GGUF; repeatable)"},
			&cli.StringSliceFlag{Name: "tensor-type", Usage: "lora with a quantized --type: `REGEX=TYPE` as in sdtool quantize (the last match wins)"},
			&cli.StringFlag{Name: "tensor-type-rules", Usage: "lora with a quantized --type: `\"REGEX=TYPE,...\"` as sd.cpp reads them (the first match wins)"},
			&cli.BoolFlag{Name: "pure", Usage: "lora with a mix --type: give every eligible tensor the base type"},
			&cli.IntFlag{Name: "convrot-group-size", Value: 256, Usage: "lora with --type int8_convrot: rotation group `G` (a power of 4), as in sdtool quantize"},
			&cli.StringSliceFlag{Name: "target", Usage: "lora with a quantized --type: `CONSUMER` to check, as in sdtool quantize (sdcpp, comfyui, ggml or all)"},
			&cli.BoolFlag{Name: "strict", Usage: "refuse an output that holds NaN or infinite values, or (lora with a quantized --type) that a --target cannot load"},
			&cli.StringSliceFlag{Name: "metadata", Usage: "lora with a quantized --type: `KEY=VALUE` string written into the output's metadata (repeatable)"},
			&cli.BoolFlag{Name: "allow-missing", Usage: "copy A's tensor where B or C lacks it or has another shape"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE` (.safetensors or .gguf)"},
			threadsFlag("`N` worker threads"),
			maxMemoryFlag(),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list each output tensor with its source and write nothing"},
			jsonWriteFlag(),
		}, splitFlags()...),
		Action: runMerge,
	},
		"sdtool merge --recipe testdata/merge-recipe.json -o out/grafted.safetensors --dry-run",
		"sdtool merge --recipe testdata/merge-recipe.json -o out/grafted.gguf",
		"sdtool merge --recipe testdata/merge-recipe.json -o out/grafted.safetensors --dry-run --json",
		"sdtool merge --method weighted_sum -a testdata/tiny-sd1.safetensors -b out/grafted.gguf --allow-missing --alpha 0.3 -o out/avg.safetensors",
		"sdtool merge --method add_difference -a out/avg.safetensors -b testdata/tiny-sd1.safetensors -c out/avg.safetensors --alpha-rules 'input_blocks\\.=0.3,output_blocks\\.=0.7' -o out/diff.gguf --type q8_0",
		"sdtool merge --method dare -a testdata/tiny-sd1.safetensors -b out/avg.safetensors --drop-p 0.9 --seed 7 -o out/dare.safetensors",
		"sdtool merge --base testdata/tiny-sd1.safetensors --lora testdata/tiny-sd1-lora.safetensors:0.8 -o out/baked.safetensors --dry-run",
		"sdtool merge --base testdata/tiny-sd1.safetensors --lora testdata/tiny-sd1-lora.safetensors:0.8 -o out/baked.safetensors",
		"sdtool merge --base testdata/tiny-sd1.safetensors --lora testdata/tiny-sd1-lora.safetensors --lora testdata/tiny-sd1-lora.safetensors:-0.5 -o out/baked-q4_k_m.gguf --type Q4_K_M --imatrix testdata/tiny-sd1.imatrix.dat",
	)
}

func runMerge(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("merge: unexpected arguments %q (inputs are given with --recipe or -a/-b/-c; see sdtool merge --help)", c.Args().Slice())
	}
	recipe, method := c.String("recipe"), c.String("method")
	var plan *pipeline.Plan
	var err error
	switch {
	case c.IsSet("base") || c.IsSet("lora"):
		if recipe != "" || method != "" {
			return errors.New("merge: --base/--lora (a LoRA bake) excludes --recipe and --method")
		}
		return runMergeLoRA(c)
	case recipe != "" && method != "":
		return errors.New("merge: --recipe and --method exclude each other")
	case recipe != "":
		if err := loraOnly(c); err != nil {
			return err
		}
		for _, f := range []string{"a", "b", "c", "alpha", "alpha-rules", "density", "drop-p", "seed", "allow-missing"} {
			if c.IsSet(f) {
				dash := "--"
				if len(f) == 1 {
					dash = "-"
				}
				return fmt.Errorf("merge: %s%s is for arithmetic merges (--method), not --recipe", dash, f)
			}
		}
		r, err := merge.LoadRecipe(recipe)
		if err != nil {
			return err
		}
		plan, err = merge.PlanRecipe(r, c.String("output"), c.String("dtype"))
		if err != nil {
			return err
		}
	case method != "":
		if err := loraOnly(c); err != nil {
			return err
		}
		a := &merge.Arithmetic{
			Method:       merge.Method(method),
			A:            c.String("a"),
			B:            c.String("b"),
			C:            c.String("c"),
			AlphaRules:   c.String("alpha-rules"),
			Density:      c.Float64("density"),
			Seed:         c.Int64("seed"),
			Type:         c.String("dtype"),
			AllowMissing: c.Bool("allow-missing"),
		}
		if c.IsSet("alpha") {
			v := c.Float64("alpha")
			a.Alpha = &v
		}
		p := c.Float64("drop-p")
		a.DropP = &p
		plan, err = merge.PlanArithmetic(a, c.String("output"))
		if err != nil {
			return err
		}
	default:
		return errors.New("merge: give --recipe RECIPE.json or --method METHOD (see sdtool merge --help)")
	}
	defer plan.Close()
	return writePlan(c, plan, "merge", nil)
}

// loraFlags are the flags only a LoRA bake takes.
var loraFlags = []string{"allow-unmatched", "imatrix", "tensor-type", "tensor-type-rules", "pure", "convrot-group-size", "target", "metadata"}

func loraOnly(c *cli.Context) error {
	for _, f := range loraFlags {
		if c.IsSet(f) {
			return fmt.Errorf("merge: --%s is for LoRA bakes (--base --lora)", f)
		}
	}
	return nil
}

// runMergeLoRA bakes adapters into a base. Without --type, or with a float
// type into .safetensors, merge plans the output; any other type is
// quantize's (types, mixes, importance matrices, ComfyUI int8/fp8), planned
// by quantize over the baked model as it would plan a stored one.
func runMergeLoRA(c *cli.Context) error {
	for _, f := range []string{"a", "b", "c", "alpha", "alpha-rules", "density", "drop-p", "seed", "allow-missing"} {
		if c.IsSet(f) {
			dash := "--"
			if len(f) == 1 {
				dash = "-"
			}
			return fmt.Errorf("merge: %s%s is for arithmetic merges (--method), not a LoRA bake", dash, f)
		}
	}
	if !c.IsSet("base") {
		return errors.New("merge: --lora needs --base MODEL")
	}
	if !c.IsSet("lora") {
		return errors.New("merge: --base needs at least one --lora FILE[:STRENGTH]")
	}
	opts := &merge.BakeOptions{Base: c.String("base"), AllowUnmatched: c.Bool("allow-unmatched"), Log: slog.Default()}
	for _, s := range c.StringSlice("lora") {
		a, err := merge.ParseAdapter(s)
		if err != nil {
			return err
		}
		opts.Adapters = append(opts.Adapters, a)
	}
	bake, err := merge.OpenBake(opts)
	if err != nil {
		return err
	}
	defer bake.Close()
	out, typ := c.String("output"), c.String("dtype")
	var plan *pipeline.Plan
	if _, float, _ := merge.ParseFloatDType(typ); typ == "" || float && strings.EqualFold(filepath.Ext(out), ".safetensors") {
		for _, f := range loraFlags[1:] {
			if c.IsSet(f) {
				return fmt.Errorf("merge: --%s applies with a --type that quantizes (see sdtool quantize --help)", f)
			}
		}
		if plan, err = bake.PlanOutput(out, typ); err != nil {
			return err
		}
	} else {
		plan, _, err = quantize.PlanModel(&quantize.Options{
			Input:           opts.Base,
			Output:          out,
			Type:            typ,
			Pure:            c.Bool("pure"),
			TensorTypes:     c.StringSlice("tensor-type"),
			TensorTypeRules: c.String("tensor-type-rules"),
			Imatrix:         c.StringSlice("imatrix"),
			AllowRequantize: true,
			Targets:         c.StringSlice("target"),
			Strict:          c.Bool("strict"),
			GroupSize:       c.Int("convrot-group-size"),
			Metadata:        append([]string{"sdtool.merge=" + bake.Description()}, c.StringSlice("metadata")...),
			Log:             slog.Default(),
		}, bake.Model)
		if err != nil {
			return err
		}
		bake.Annotate(plan)
	}
	defer plan.Close()
	if c.Bool("dry-run") && !c.Bool("json") {
		if err := bake.WriteChanges(c.App.Writer); err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer)
	}
	return writePlan(c, plan, "merge", nil)
}
