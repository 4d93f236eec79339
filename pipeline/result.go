package pipeline

import "fmt"

// Result is what a writing command (convert, quantize, merge) prints with
// --json, for a dry run and after a write alike: the plan's summary with
// one row per tensor, the file's size and the notes. Its JSON form is
// documented in docs/write-json.md; field names are stable.
type Result struct {
	// Command is the subcommand that made the plan ("quantize").
	Command string `json:"command"`
	// Output is the output file's path.
	Output string `json:"output"`
	// Format is the output's format ("gguf", "safetensors").
	Format string `json:"format"`
	// DryRun is true when nothing was written.
	DryRun bool `json:"dry_run"`
	// FileBytes is the size of the file, header and padding included
	// (what it will be after a dry run, what it is after a write).
	FileBytes int64 `json:"file_bytes"`
	// Parameters is the element count of the outputs that have a source,
	// which parameter_bits_per_weight divides by.
	Parameters int64 `json:"parameters"`
	// ParameterBitsPerWeight is 8*bytes/parameters, the summary line's figure.
	ParameterBitsPerWeight float64 `json:"parameter_bits_per_weight"`
	// Summary gives the tensors, the totals per type and the byte counts.
	Summary
	// Notes are the summary's closing lines (consumers, carried metadata, ...).
	Notes []string `json:"notes"`
}

// Result describes the plan as --json prints it; command names the
// subcommand and dryRun says whether the plan is only shown.
func (p *Plan) Result(command string, dryRun bool) (*Result, error) {
	s, err := p.Summary()
	if err != nil {
		return nil, err
	}
	size, err := p.FileSize()
	if err != nil {
		return nil, err
	}
	r := &Result{Command: command, Output: p.Path, Format: p.Format.Name, DryRun: dryRun, FileBytes: size,
		Parameters: s.params, ParameterBitsPerWeight: bpw(s.Bytes, s.params), Summary: s, Notes: p.Notes}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.ByType == nil {
		r.ByType = []TypeSummary{}
	}
	return r, nil
}

// FileSize returns the size the output file has once written: the
// format's header and padding and every tensor's data.
func (p *Plan) FileSize() (int64, error) {
	if p.Format.New == nil {
		return 0, fmt.Errorf("%s: no output format", p.Path)
	}
	ts, err := p.Tensors()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Path, err)
	}
	w, err := p.Format.New(nil, ts, p.header())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Path, err)
	}
	return w.Size(), nil
}
