package inspect

import (
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"
)

// TestWriteTableMatchesTabwriter: the streaming table lays out what
// text/tabwriter (padding 2, blanks) does, wide and non-ASCII cells and
// empty ones included.
func TestWriteTableMatchesTabwriter(t *testing.T) {
	rows := [][]string{
		{"NAME", "TYPE", "SHAPE", "LAST"},
		{"a", "f16", "[2, 3]", "1"},
		{"model.diffusion_model.input_blocks.1.1.proj_in.weight", "=", "", "0.25"},
		{"猫.weight", "q4_K", "[320, 4, 3, 3] -> [320, 36]", ""},
		{"", strings.Repeat("x", 100), "é", "last cell is not padded"},
	}
	var want strings.Builder
	tw := tabwriter.NewWriter(&want, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
	var got strings.Builder
	err := writeTable(&got, len(rows)-1, func(i int, cells []string) []string { return append(cells, rows[i+1]...) })
	if err != nil || got.String() != want.String() {
		t.Errorf("writeTable (%v):\n%s\ntabwriter:\n%s", err, got.String(), want.String())
	}
}
