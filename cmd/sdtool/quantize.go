package main

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
)

func init() {
	register(&cli.Command{
		Name:      "quantize",
		Usage:     "quantize a model to a ggml type or mix (GGUF) or to ComfyUI INT8/FP8 (safetensors), like llama-quantize",
		ArgsUsage: "IN -o OUT --type TYPE (or llama-quantize's IN OUT TYPE [NTHREADS])",
		Description: "Reads IN (GGUF, split GGUF, safetensors, a sharded index or shard; ComfyUI int8/fp8 layers are\n" +
			"dequantized exactly; ggml-quantized tensors are decoded for a float --type, and requantized only\n" +
			"with --allow-requantize) and writes OUT. The output format follows --type, and OUT must have its\n" +
			"extension:\n\n" +
			quantize.TypeTableText("   ") + "\n" +
			"Mix names are case-insensitive (Q4_K means Q4_K_M, as in llama.cpp); a lower-case ggml name such as\n" +
			"q4_K is that type alone. Every mix quantizes only 2-D .weight tensors; norms, 1-D and small tensors\n" +
			"and what the model family keeps (embeddings, in/out layers, modulation; docs/families.md) stay F16,\n" +
			"BF16 or F32. A row that the type's\n" +
			"block does not divide gets the closest type that fits (q4_K -> q5_0, q6_K -> q8_0, ...), shown by\n" +
			"--dry-run. --tensor-type REGEX=TYPE (repeatable) overrides eligible tensors, the last matching rule\n" +
			"winning (llama.cpp); --tensor-type-rules \"REGEX=TYPE,...\" does the same with sd.cpp's first-match\n" +
			"rule. For the ComfyUI types the rule TYPE is int8_convrot, int8, fp8_e4m3, fp8_e5m2, nvfp4, mxfp8,\n" +
			"convrot_w4a4, asym_w4a8_int8, keep, f16, bf16 or\n" +
			"f32; by default modules go on the diffusion model's linear layers only, and a rule asking for one on a\n" +
			"convolution, norm or lookup table is an error. A standalone T5/UMT5/Qwen/Llama 3/Mistral/Gemma 3 text encoder's GGUF\n" +
			"gets llama.cpp's tensor names and architecture (--te-names), with q/k rows permuted for llama and norms +1 for gemma3. --imatrix files (.dat or GGUF) give importance weights as llama.cpp uses them (sums over\n" +
			"counts; several files weighted by their counts); without one, ggml's unweighted quantizers run.\n" +
			"For nvfp4 and mxfp8 they choose each block's scale among its neighbours by the weighted error.\n" +
			"GGUF outputs keep every dim, get general.architecture (ComfyUI-GGUF's name), general.file_type,\n" +
			"general.quantization_version=2, quantize.imatrix.* and comfy.gguf.orig_shape.* for folded (>4-D)\n" +
			"or --reshape-conv tensors. The plan says which of sd.cpp, ComfyUI-GGUF and ggml can load the\n" +
			"output (types, name lengths, dims); --strict refuses when a --target cannot.\n\n" +
			"--budget SIZE (or --bpw N), without --type, measures every eligible tensor's error in each\n" +
			"--budget-types candidate (streamed in bounded chunks; columns weighted by --imatrix) and gives\n" +
			"each tensor the type that buys the most error reduction per byte, so that the file fits SIZE\n" +
			"(header included; sizes: " + pipeline.SizeUnits + "); tensors kept in high precision stay\n" +
			"so and --tensor-type rules pin tensors.\n" +
			"--write-rules and --write-type-file save the choice as --tensor-type-rules text and as a\n" +
			"llama.cpp --tensor-type-file (NAME=TYPE lines; after the model, and not in a dry run, which writes\n" +
			"nothing: --dry-run --json lists every tensor's type), which --tensor-type-file reads; --types-from\n" +
			"OTHER.gguf copies another file's types (same tensor names).\n\n" +
			"A ladder: --type Q8_0,Q6_K,...,int8_convrot (a comma-separated list) with -o 'DIR/NAME-{type}.{ext}'\n" +
			"reads and decodes each input tensor once and writes every file in one pass ({ext} is gguf or\n" +
			"safetensors as the type needs), then DIR/manifest.json: each file's type, size, bits per weight,\n" +
			"sha256 and the consumers that load it (docs/ladder-manifest.md). Memory in flight is the number of\n" +
			"files times --max-memory; a failure or Ctrl-C removes every partial file.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE` (.gguf, or .safetensors for the ComfyUI types: int8_convrot, int8, fp8_e4m3, fp8_e5m2, nvfp4, mxfp8, convrot_w4a4, asym_w4a8_int8)"},
			&cli.StringFlag{Name: "type", Usage: "`TYPE` or mix from the table above"},
			&cli.BoolFlag{Name: "pure", Usage: "give every eligible tensor the base type (no mix upgrades)"},
			&cli.StringSliceFlag{Name: "tensor-type", Usage: "`REGEX=TYPE` for matching eligible tensors (repeatable; the last match wins)"},
			&cli.StringFlag{Name: "tensor-type-rules", Usage: "`\"REGEX=TYPE,...\"` as sd.cpp reads them (the first match wins); not with --tensor-type"},
			&cli.StringSliceFlag{Name: "imatrix", Usage: "importance matrix `FILE` (.dat or GGUF; repeatable); for fp8 and nvfp4 outputs, a GGUF one from generate --imatrix-out also calibrates input_scale"},
			&cli.StringFlag{Name: "tensor-type-file", Usage: "llama.cpp `FILE` of NAME=TYPE items for eligible tensors (the first match wins; --tensor-type rules override it)"},
			&cli.StringFlag{Name: "types-from", Usage: "copy every eligible tensor's type from this `GGUF` (same tensor names)"},
			&cli.BoolFlag{Name: "allow-requantize", Usage: "accept ggml-quantized inputs for a quantized --type (dequantized first; quality suffers); a float --type (F16, BF16, F32) needs no flag"},
			&cli.BoolFlag{Name: "reshape-conv", Usage: "sd1/sdxl: store tensors as rows of 256 so k-quants apply (ComfyUI-GGUF only; sd.cpp cannot load it)"},
			&cli.StringSliceFlag{Name: "target", Usage: "`CONSUMER` to check: sdcpp, comfyui, ggml or all (repeatable or comma-separated; default all)"},
			&cli.BoolFlag{Name: "strict", Usage: "refuse an output that a --target cannot load, or in which NaN, Inf or overflow (finite values encoded as non-finite) occur (a warning with counts otherwise)"},
			&cli.IntFlag{Name: "convrot-group-size", Value: 256, Usage: "rotation group `G` for int8_convrot, convrot_w4a4 and asym_w4a8_int8 (a power of 4); where G does not divide a layer's input width, int8_convrot writes plain int8 and the 4-bit types a smaller power of 4"},
			&cli.StringSliceFlag{Name: "metadata", Usage: "`KEY=VALUE` string written into the output's metadata (repeatable)"},
			&cli.StringFlag{Name: "metadata-preset", Value: "default", Usage: "`PRESET`: default (architecture, file type, imatrix keys, input GGUF keys) or none"},
			&cli.StringFlag{Name: "te-names", Value: "llama.cpp", Usage: "`NAMES` of a standalone T5/UMT5/Qwen/Llama/Mistral/Gemma text encoder's GGUF tensors: llama.cpp (ComfyUI-GGUF's text loader needs them; sd.cpp reads them too) or sdcpp (the input's)"},
			&cli.StringFlag{Name: "tokenizer", Usage: "byte-level BPE tokenizer.json `FILE` (or its folder) to embed under tokenizer.ggml.* in a GGUF output: a Mistral text encoder needs it for ComfyUI-GGUF, which rebuilds the Tekken tokenizer from it"},
			&cli.StringFlag{Name: "budget", Usage: "largest output file `SIZE`, header included (4.5GiB, 1.2GB; " + pipeline.SizeUnits + "): choose each eligible tensor's type for the least measured error; no --type"},
			&cli.Float64Flag{Name: "bpw", Usage: "like --budget, as at most `N` bits per weight over the whole model"},
			&cli.StringFlag{Name: "budget-types", Usage: "comma-separated candidate `TYPES` for --budget/--bpw", DefaultText: budgetTypesDefault()},
			&cli.StringFlag{Name: "budget-metric", Value: "relative", Usage: "`METRIC` the budget minimises: relative (each tensor's error over its weights) or absolute"},
			&cli.StringFlag{Name: "write-rules", Usage: "with --budget/--bpw: write the chosen types as --tensor-type-rules text to `FILE`"},
			&cli.StringFlag{Name: "write-type-file", Usage: "with --budget/--bpw: write the chosen types as a llama.cpp --tensor-type-file to `FILE`"},
			threadsFlag("`N` worker threads"),
			maxMemoryFlag(),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the plan (types, sizes, reasons, consumers) and write nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print the plan, the file's size and its consumers as JSON on stdout (a ladder: every file's, and the manifest's path) instead of the table and summary (docs/write-json.md)"},
		}, splitFlags()...),
		Action: runQuantize,
	},
		"sdtool quantize testdata/tiny-sd1.safetensors -o out/tiny-q4_k_m.gguf --type Q4_K_M --dry-run",
		"sdtool quantize testdata/tiny-sd1.safetensors -o out/tiny-q8_0.gguf --type q8_0 --tensor-type 'attn2\\.to_[kv]=f16' --metadata general.name=tiny",
		"sdtool quantize testdata/tiny-sd1.safetensors -o out/tiny-int8.safetensors --type int8_convrot --convrot-group-size 16",
		"sdtool quantize testdata/tiny-sd1.safetensors -o out/tiny-budget.gguf --budget 3MB --write-type-file out/tiny-budget.types.txt",
		"sdtool quantize testdata/tiny-sd1.safetensors -o out/tiny-mixed.safetensors --type int8_convrot --tensor-type-rules 'mlp\\.fc2=fp8_e4m3,attn1\\.to_q=keep' --dry-run",
		"sdtool quantize testdata/tiny-sd1.safetensors --type Q8_0,Q6_K,Q4_K_M,Q2_K,int8_convrot -o 'out/tiny-{type}.{ext}'",
		"sdtool quantize testdata/tiny-sd1.safetensors -o out/tiny-q4_k_m.gguf --type Q4_K_M --dry-run --json",
	)
}

func runQuantize(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("quantize: want one input model, got %s: write sdtool quantize IN -o OUT --type TYPE (or llama-quantize's IN OUT TYPE)",
			pipeline.Count(c.NArg(), "argument", "arguments"))
	}
	opts := &quantize.Options{
		Input:            c.Args().First(),
		Output:           c.String("output"),
		Type:             c.String("type"),
		Pure:             c.Bool("pure"),
		TensorTypes:      c.StringSlice("tensor-type"),
		TensorTypeRules:  c.String("tensor-type-rules"),
		Imatrix:          c.StringSlice("imatrix"),
		AllowRequantize:  c.Bool("allow-requantize"),
		ReshapeConv:      c.Bool("reshape-conv"),
		Targets:          c.StringSlice("target"),
		Strict:           c.Bool("strict"),
		GroupSize:        c.Int("convrot-group-size"),
		Metadata:         c.StringSlice("metadata"),
		MetadataPreset:   c.String("metadata-preset"),
		TextEncoderNames: c.String("te-names"),
		Tokenizer:        c.String("tokenizer"),
		TensorTypeFile:   c.String("tensor-type-file"),
		TypesFrom:        c.String("types-from"),
		Log:              slog.Default(),
	}
	if err := budgetOptions(c, opts); err != nil {
		return err
	}
	split, err := splitLimits(c)
	if err != nil {
		return err
	}
	opts.Split = split
	if quantize.IsLadder(opts.Type) {
		return runLadder(c, opts)
	}
	// The recipe files are checked first (a budget measures for minutes)
	// and written after the model (a dry run writes neither).
	if err := writeRecipe(c, nil, readFiles(c), true); err != nil {
		return err
	}
	finish := watchBudget(c, opts.Budget)
	plan, res, err := quantize.Plan(opts)
	finish(err)
	if err != nil {
		return err
	}
	defer plan.Close()
	plan.Inputs = append(plan.Inputs, readFiles(c)...)
	if err := checkWritten(c, plan.Inputs); err != nil {
		return err
	}
	if c.Bool("dry-run") {
		for _, f := range []string{"write-rules", "write-type-file"} {
			if p := c.String(f); p != "" {
				fmt.Fprintf(c.App.ErrWriter, "%s not written (--dry-run; %s)\n", p, pipeline.Count(len(res.Recipe()), "tensor type", "tensor types"))
			}
		}
	}
	err = writePlan(c, plan, "quantize", func(r *pipeline.Result) any {
		return quantizeResult{Result: r, Consumers: orEmpty(res.Consumers), Warnings: orEmpty(res.Warnings)}
	})
	if err != nil || c.Bool("dry-run") {
		return err
	}
	return writeRecipe(c, res, plan.Inputs, false)
}

// quantizeResult is quantize's --json: the plan's, with the consumers that
// can load the file and the warnings (docs/write-json.md).
type quantizeResult struct {
	*pipeline.Result
	// Consumers says which of sd.cpp, ComfyUI-GGUF and ggml load the file.
	Consumers []quantize.Consumer `json:"consumers"`
	// Warnings are the problems that did not stop the plan.
	Warnings []string `json:"warnings"`
}

// orEmpty returns s, or an empty slice for nil, so that JSON lists are [] and never null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// llamaQuantizeOrder rewrites llama-quantize's positional form, sdtool
// quantize IN OUT TYPE [NTHREADS], as IN -o OUT --type TYPE [--threads
// NTHREADS] when neither -o nor --type is given, so that the habit works.
// args are normalizeArgs's: the flags first, then "--" and the positionals.
func llamaQuantizeOrder(args []string) []string {
	cmd := 1
	for cmd < len(args) && isFlag(args[cmd]) {
		cmd++
	}
	if cmd >= len(args) || args[cmd] != "quantize" {
		return args
	}
	rest := args[cmd+1:]
	dash := slices.Index(rest, "--")
	if dash < 0 {
		return args
	}
	flags, pos := rest[:dash], rest[dash+1:]
	if len(pos) != 3 && len(pos) != 4 {
		return args
	}
	for _, a := range flags {
		if n := flagName(a); isFlag(a) && (n == "o" || n == "output" || n == "type") {
			return args
		}
	}
	out := append(slices.Clone(args[:cmd+1]), flags...)
	out = append(out, "-o", pos[1], "--type", pos[2])
	if len(pos) == 4 {
		out = append(out, "--threads", pos[3])
	}
	return append(out, "--", pos[0])
}
