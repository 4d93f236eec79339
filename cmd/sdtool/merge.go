package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/merge"
	"github.com/sdtool/sdtool/pipeline"
)

func init() {
	register(&cli.Command{
		Name:      "merge",
		Usage:     "graft tensors from several files by rules (--recipe), or merge models arithmetically (--method)",
		ArgsUsage: "--recipe RECIPE.json -o OUT | --method METHOD -a A -b B [-c C] -o OUT",
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
			"Both write OUT (.safetensors or .gguf, by extension) as OUT.partial and rename it when complete;\n" +
			"an existing OUT needs --force, and OUT can never be an input.",
		Flags: []cli.Flag{
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
			&cli.StringFlag{Name: "dtype", Aliases: []string{"type"}, Usage: "output `TYPE`: recipe: f32, f16 or bf16 for ggml-quantized tensors; arithmetic: any type"},
			&cli.BoolFlag{Name: "allow-missing", Usage: "copy A's tensor where B or C lacks it or has another shape"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE` (.safetensors or .gguf)"},
			threadsFlag("`N` worker threads"),
			maxMemoryFlag(),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list each output tensor with its source and write nothing"},
		},
		Action: runMerge,
	},
		"sdtool merge --recipe testdata/merge-recipe.json -o grafted.safetensors --dry-run",
		"sdtool merge --recipe testdata/merge-recipe.json -o grafted.gguf",
		"sdtool merge --method weighted_sum -a testdata/tiny-sd1.safetensors -b grafted.gguf --allow-missing --alpha 0.3 -o avg.safetensors",
		"sdtool merge --method add_difference -a avg.safetensors -b testdata/tiny-sd1.safetensors -c avg.safetensors --alpha-rules 'input_blocks\\.=0.3,output_blocks\\.=0.7' -o diff.gguf --type q8_0",
		"sdtool merge --method dare -a testdata/tiny-sd1.safetensors -b avg.safetensors --drop-p 0.9 --seed 7 -o dare.safetensors",
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
	case recipe != "" && method != "":
		return errors.New("merge: --recipe and --method exclude each other")
	case recipe != "":
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
	return writePlan(c, plan, "merge")
}
