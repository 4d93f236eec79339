package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/convert"
	"github.com/sdtool/sdtool/formats"
)

func init() {
	register(&cli.Command{
		Name:      "export",
		Usage:     "write a GGUF (or any model) back to safetensors with the names a consumer expects",
		ArgsUsage: "IN",
		Description: "Writes IN as safetensors: F16, BF16, F32 and integer tensors copied byte for byte, quantized ones (ggml\n" +
			"types, ComfyUI int8/fp8 modules) decoded to --dtype, tensors that ComfyUI-GGUF stores reshaped\n" +
			"(comfy.gguf.orig_shape) given back their shape, string metadata carried into __metadata__. --names:\n" +
			"keep (as stored); ldm (a single-file checkpoint's: a bare diffusion model gets model.diffusion_model.);\n" +
			"comfyui (ComfyUI's models/diffusion_models layout: a diffusion model alone loses\n" +
			"model.diffusion_model.; a full checkpoint keeps its names, which ComfyUI's checkpoint loader reads);\n" +
			"sdcpp (stable-diffusion.cpp's internal names, as convert --convert-name stores them); diffusers (an\n" +
			"SD 1.x, 2.x or XL UNet alone: the names of a diffusers folder's unet/diffusion_pytorch_model).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE`.safetensors"},
			&cli.StringFlag{Name: "names", Value: convert.NamesKeep, Usage: "naming `SCHEME`: " + strings.Join(convert.NameSchemes, ", ")},
			&cli.StringFlag{Name: "dtype", Value: "f16", Usage: "`TYPE` quantized tensors are decoded to: f16, bf16 or f32"},
			threadsFlag("`N` worker threads"),
			maxMemoryFlag(),
			&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the plan (names, types, shapes) and write nothing"},
		},
		Action: runExport,
	},
		"sdtool export testdata/tiny-flux.gguf --names comfyui -o out/tiny-flux.safetensors --force",
		"sdtool export testdata/tiny-sdxl.gguf --names sdcpp --dtype f32 -o out/tiny-sdxl-sdcpp.safetensors --dry-run",
	)
}

func runExport(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("export: want one input (see sdtool export --help)")
	}
	out := c.String("output")
	if out == "" {
		return fmt.Errorf("export: name the output with -o FILE.safetensors")
	}
	dt, ok := formats.ParseType(strings.ToLower(c.String("dtype")))
	if !ok {
		return fmt.Errorf("--dtype %q: want f16, bf16 or f32", c.String("dtype"))
	}
	m, err := formats.Open(c.Args().First())
	if err != nil {
		return err
	}
	plan, err := convert.ExportPlan(m, out, convert.ExportOptions{Names: c.String("names"), DType: dt})
	if err != nil {
		m.Close()
		return err
	}
	defer plan.Close()
	return writePlan(c, plan, "export", nil)
}
