// Command gentiny writes testdata/tiny-sd1.gguf (tinysd.Tiny), with -sdxl
// testdata/tiny-sdxl.gguf (tinysd.TinySDXL), or with -sd15 a synthetic
// model of SD 1.5's full size for benchmarks (-quant q4_K quantizes its
// linear weights):
//
//	go run ./internal/tinysd/cmd/gentiny [-o testdata/tiny-sd1.gguf]
//	go run ./internal/tinysd/cmd/gentiny -sdxl -o testdata/tiny-sdxl.gguf
//	go run ./internal/tinysd/cmd/gentiny -sd15 [-quant q4_K] -o /tmp/sd15.gguf
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/tinysd"
)

func main() {
	out := flag.String("o", "testdata/tiny-sd1.gguf", "output file")
	sd15 := flag.Bool("sd15", false, "SD 1.5's full size instead of the tiny model")
	sdxl := flag.Bool("sdxl", false, "the tiny SDXL-layout model")
	q := flag.String("quant", "", "type of the linear weights (q8_0, q4_K, ...)")
	flag.Parse()
	c := tinysd.Tiny
	switch {
	case *sd15:
		c = tinysd.SD15
	case *sdxl:
		c = tinysd.TinySDXL
	}
	if *q != "" {
		t, ok := formats.ParseType(*q)
		if !ok {
			fmt.Fprintf(os.Stderr, "gentiny: unknown type %q\n", *q)
			os.Exit(2)
		}
		c.Quant = t
	}
	if err := c.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gentiny:", err)
		os.Exit(1)
	}
}
