package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/convert"
	"github.com/sdtool/sdtool/family"
)

// convertUsage is the help text of an input flag of convert.
func convertUsage(in *family.Input) string {
	switch {
	case in.Whole():
		return "a full checkpoint (names kept as they are)"
	case !in.SDCpp:
		return fmt.Sprintf("a %s (prefix %s; sd-cli's convert has no such flag)", in.What, in.ConvertPrefix)
	}
	return fmt.Sprintf("a %s (prefix %s)", in.What, in.ConvertPrefix)
}

func init() {
	flags := []cli.Flag{}
	for _, in := range family.Inputs {
		f := &cli.StringFlag{Name: in.Flag, Usage: convertUsage(in) + ": `FILE`"}
		if in.Alias != "" {
			f.Aliases = []string{in.Alias}
		}
		flags = append(flags, f)
	}
	flags = append(flags,
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE`: .gguf (default layout of sd-cli) or .safetensors"},
		&cli.StringFlag{Name: "type", Usage: "target `TYPE`: a ggml type name in any case (f32, f16, bf16, q8_0, q4_K, iq4_xs, ...)"},
		&cli.StringSliceFlag{Name: "tensor-type-rules", Usage: "`\"REGEX=TYPE,...\"`: first match wins; repeated flags are joined with commas as sd-cli does"},
		&cli.StringSliceFlag{Name: "imatrix", Aliases: []string{"imat-in"}, Usage: "importance matrix `FILE` (.dat or GGUF; repeatable: stored values are summed as sd.cpp does)"},
		&cli.BoolFlag{Name: "convert-name", Usage: "store sd.cpp's converted tensor names"},
		&cli.StringSliceFlag{Name: "tokenizer", Usage: "embed the tokenizer at `PATH` (CLIP: tokenizer.json, vocab.json+merges.txt or their folder; T5: spiece.model or its tokenizer.json; an LLM such as Qwen: its byte-level BPE tokenizer.json, vocab.json+merges.txt or their folder) where generate finds it (repeatable)"},
		&cli.BoolFlag{Name: "no-metadata", Usage: "write no metadata, as sd-cli does (its exact bytes even for inputs with metadata)"},
		&cli.StringSliceFlag{Name: "metadata", Usage: "`KEY=VALUE` string added to the output's metadata (repeatable), e.g. sdtool.unet.num_heads=8"},
		&cli.BoolFlag{Name: "dequantize", Usage: "decode ComfyUI int8 (convrot) and FP8 modules to floats first, then convert (sd-cli keeps them as stored)"},
		strictFlag(),
		threadsFlag("`N` worker threads"),
		maxMemoryFlag(),
		&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print the plan (types, sizes, bits per weight) and write nothing"},
		jsonWriteFlag(),
	)
	flags = append(flags, splitFlags()...)
	register(&cli.Command{
		Name:  "convert",
		Usage: "convert checkpoints the way `sd-cli -M convert` does, byte for byte",
		Description: "Reads safetensors (single or sharded) and GGUF inputs, gives each the name prefix sd-cli gives it,\n" +
			"and writes the same GGUF bytes as `sd-cli -M convert` with the same inputs and flags: sd.cpp's tensor\n" +
			"order, its dtype handling (F64 to F32, I64 to I32, F8 to F16, U8 skipped, int8_tensorwise kept), its\n" +
			"exclusions (biases, embeddings, rows that do not fit the block), --tensor-type-rules where the first\n" +
			"match wins, and ggml's weighted quantizers with an all-ones vector or the summed --imatrix files.\n" +
			"Unlike sd-cli, the inputs' metadata is carried into the output (GGUF keys as typed; safetensors\n" +
			"__metadata__ as strings, arrays as typed JSON text), so head counts and an embedded tokenizer survive and\n" +
			"`sdtool generate` runs the result; --no-metadata writes none, sd-cli's exact bytes (inputs without\n" +
			"metadata, or with only safetensors' \"format\", give those bytes either way).\n" +
			"Unlike sd-cli, a bad type, rule or regex is an error before anything is written (Go regexps are RE2:\n" +
			"no lookaround or backreferences), tensors that cannot change type are kept and reported, and the\n" +
			"output is written to OUT.partial and renamed only when complete. FP8 is not a GGUF type: use\n" +
			"`sdtool quantize --type fp8_e4m3` for ComfyUI FP8 safetensors.",
		Flags:  flags,
		Action: runConvert,
	},
		"sdtool convert -m testdata/tiny-sd1.safetensors -o out/tiny-sd1-q8_0.gguf --type q8_0 --force",
		"sdtool convert -m testdata/tiny-sd1.safetensors -o out/tiny-sd1-q4_K.gguf --type q4_K --tensor-type-rules '^first_stage_model\\.=f16,attn2\\.to_[kv]=q8_0' --dry-run",
		"sdtool convert -m testdata/tiny-sd1.safetensors -o out/tiny-sd1-q8_0.gguf --type q8_0 --dry-run --json",
	)
}

func runConvert(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("convert: unexpected argument %q (inputs are given with -m, --diffusion-model, --vae, ...)", c.Args().First())
	}
	opts := &convert.Options{
		Inputs:      map[string]string{},
		Output:      c.String("output"),
		Type:        c.String("type"),
		Rules:       strings.Join(c.StringSlice("tensor-type-rules"), ","),
		Imatrix:     c.StringSlice("imatrix"),
		ConvertName: c.Bool("convert-name"),
		Dequantize:  c.Bool("dequantize"),
		NoMetadata:  c.Bool("no-metadata"),
		Metadata:    c.StringSlice("metadata"),
		Tokenizers:  c.StringSlice("tokenizer"),
		Log:         slog.Default(),
	}
	for _, in := range family.Inputs {
		if v := c.String(in.Flag); v != "" {
			opts.Inputs[in.Flag] = v
		}
	}
	plan, err := convert.Plan(opts)
	switch {
	case errors.Is(err, convert.ErrNoInput):
		return fmt.Errorf("%w: give at least one of %s", err, strings.Join(inputFlags(), ", "))
	case errors.Is(err, convert.ErrNoOutput):
		return fmt.Errorf("%w: give -o OUT.gguf or -o OUT.safetensors", err)
	case err != nil:
		return err
	}
	defer plan.Close()
	if n := trimNote(plan, "as sd-cli stores them (sdtool quantize keeps them, for ComfyUI-GGUF)"); n != "" {
		plan.Notes = append(plan.Notes, n)
	}
	return writePlan(c, plan, "convert", nil)
}

// inputFlags are the component flags of the input table, as a user types
// them (-m, --diffusion-model, ...).
func inputFlags() []string {
	var out []string
	for _, in := range family.Inputs {
		if in.Alias != "" {
			out = append(out, "-"+in.Alias)
		} else {
			out = append(out, "--"+in.Flag)
		}
	}
	return out
}
