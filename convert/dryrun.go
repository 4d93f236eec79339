package convert

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// WritePlan prints the plan as --dry-run shows it: one line per tensor
// (name, source type, target type, shape, bytes before and after, note),
// then the totals with bits per weight.
func WritePlan(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tFROM\tTO\tSHAPE\tBYTES IN\tBYTES OUT\tNOTE")
	for _, r := range res.Rows {
		note := r.Note
		if r.Imatrix {
			note = joinNotes("imatrix", note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%d\t%s\n", r.Name, r.From, r.To, r.Shape, r.BytesIn, r.BytesOut, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	in, out, params, bpw := Totals(res.Rows)
	fmt.Fprintf(w, "\n%d tensors, %d parameters: %s -> %s (%.2f bits per weight)\n",
		len(res.Rows), params, pipeline.HumanBytes(in), pipeline.HumanBytes(out), bpw)
	counts := map[formats.DType]int{}
	for _, r := range res.Rows {
		counts[r.To]++
	}
	for _, t := range formats.Types() {
		if counts[t] > 0 {
			fmt.Fprintf(w, "  %-8s %d tensors\n", t, counts[t])
		}
	}
	for _, name := range res.UnusedImatrix {
		fmt.Fprintf(w, "imatrix entry %q matched no quantized tensor\n", name)
	}
	return nil
}
