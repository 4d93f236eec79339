// Temporary (not committed): writes a full-depth synthetic Flux.1 dev in q8_0.
package main

import (
	"fmt"
	"os"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/synth"
)

func main() {
	c := synth.FluxFull
	c.Double, c.Single = 19, 38
	c.Quant = formats.Q8_0
	t5 := *c.T5
	t5.Layers = 24
	t5.Quant = formats.Q8_0
	c.T5 = &t5
	paths, err := c.WriteParts(os.Args[1], "flux-dev-q8_0", "gguf")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(paths)
}
