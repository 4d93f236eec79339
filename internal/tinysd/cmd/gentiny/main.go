// Command gentiny writes testdata/tiny-sd1.gguf (tinysd.Tiny):
//
//	go run ./internal/tinysd/cmd/gentiny [-o testdata/tiny-sd1.gguf]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sdtool/sdtool/internal/tinysd"
)

func main() {
	out := flag.String("o", "testdata/tiny-sd1.gguf", "output file")
	flag.Parse()
	if err := tinysd.Tiny.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gentiny:", err)
		os.Exit(1)
	}
}
