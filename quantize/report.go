package quantize

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/pipeline"
)

// Totals sums the plan: bytes before and after, parameters (of tensors
// with a source) and the output's bits per weight over those parameters.
func (r *Result) Totals() (in, out, params int64, bpw float64) {
	for _, row := range r.Rows {
		in += row.BytesIn
		out += row.BytesOut
		if row.From != "" {
			n, _ := formats.Elements(row.Shape)
			params += n
		}
	}
	if params > 0 {
		bpw = float64(out*8) / float64(params)
	}
	return
}

// WritePlan prints the plan as --dry-run shows it: one line per output
// tensor (name, source type, target type, shape, bytes before and after,
// reason), the totals with bits per weight, the tensors per type, the
// consumers that can load the output, and the imatrix report.
func WritePlan(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tFROM\tTO\tSHAPE\tBYTES IN\tBYTES OUT\tREASON")
	for _, row := range r.Rows {
		reason := row.Reason
		if row.Imatrix {
			reason = "imatrix; " + reason
		}
		shape := fmt.Sprint(row.Shape)
		if row.SourceShape != nil {
			shape = fmt.Sprintf("%v (was %v)", row.Shape, row.SourceShape)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", row.Name, row.From, row.To, shape, row.BytesIn, row.BytesOut, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	WriteSummary(w, r)
	return nil
}

// WriteSummary prints the totals, the tensors per type, the consumers and
// the imatrix report (what a run prints when it is done).
func WriteSummary(w io.Writer, r *Result) {
	in, out, params, bpw := r.Totals()
	what := r.Type
	if r.Format == "gguf" {
		what = r.FType.Name
	}
	fmt.Fprintf(w, "%s (%s): %d tensors, %d parameters: %s -> %s (%.2f bits per weight)\n",
		what, r.Format, len(r.Rows), params, pipeline.HumanBytes(in), pipeline.HumanBytes(out), bpw)
	counts := map[formats.DType]int{}
	bytes := map[formats.DType]int64{}
	for _, row := range r.Rows {
		counts[row.To]++
		bytes[row.To] += row.BytesOut
	}
	for _, t := range formats.Types() {
		if counts[t] > 0 {
			fmt.Fprintf(w, "  %-8s %5d tensors  %s\n", t, counts[t], pipeline.HumanBytes(bytes[t]))
		}
	}
	if r.Arch != "" && r.Format == "gguf" {
		arch := r.ComfyArch
		if arch == "" {
			arch = "(none)"
		}
		fmt.Fprintf(w, "architecture: %s (general.architecture %s)\n", r.Arch, arch)
	}
	for _, c := range r.Consumers {
		status := "can load it"
		if !c.OK {
			status = "cannot load it: " + strings.Join(c.Problems, "; ")
		}
		fmt.Fprintf(w, "%-8s %s\n", c.Name+":", status)
		for _, n := range c.Notes {
			fmt.Fprintf(w, "%-8s note: %s\n", "", n)
		}
	}
	if n := len(r.ImatrixMissing); n > 0 {
		fmt.Fprintf(w, "imatrix: %d tensors have no entry and are quantized without importance weights (first %q)\n", n, r.ImatrixMissing[0])
	}
	if n := len(r.ImatrixUnused); n > 0 {
		fmt.Fprintf(w, "imatrix: %d entries matched no quantized tensor (first %q)\n", n, r.ImatrixUnused[0])
	}
}
