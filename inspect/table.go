package inspect

import (
	"bufio"
	"io"
	"strings"
	"unicode/utf8"
)

// writeTable writes a header and n rows of cells in columns, as
// text/tabwriter lays them out with padding 2 and blanks (every cell but
// the last padded to its column's widest, counted in runes), without
// holding the table: a first pass over the rows measures the columns and
// a second writes them, so a table of 500k tensors costs no more memory
// than one row. row(-1, cells) appends the header's cells, row(i, cells)
// row i's; both passes must give the same cells.
func writeTable(w io.Writer, n int, row func(i int, cells []string) []string) error {
	var widths []int
	var cells []string
	for i := -1; i < n; i++ {
		cells = row(i, cells[:0])
		for k, c := range cells[:max(len(cells)-1, 0)] {
			if k == len(widths) {
				widths = append(widths, 0)
			}
			widths[k] = max(widths[k], utf8.RuneCountInString(c))
		}
	}
	bw := bufio.NewWriter(w)
	pad := strings.Repeat(" ", 64)
	for i := -1; i < n; i++ {
		cells = row(i, cells[:0])
		for k, c := range cells {
			bw.WriteString(c)
			if k == len(cells)-1 {
				break
			}
			for gap := widths[k] + 2 - utf8.RuneCountInString(c); gap > 0; gap -= len(pad) {
				bw.WriteString(pad[:min(gap, len(pad))])
			}
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
