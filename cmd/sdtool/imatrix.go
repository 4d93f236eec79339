package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/bytedance/sonic"
	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant/imatrix"
)

func init() {
	register(&cli.Command{
		Name:  "imatrix",
		Usage: "show, merge and convert importance matrices (llama.cpp .dat and GGUF imatrix)",
		Description: "Importance matrices weight the quantization error of each input column. sdtool reads and writes\n" +
			"llama.cpp's legacy .dat format (what stable-diffusion.cpp's --imat-out writes: values are mean x ncall)\n" +
			"and llama.cpp's GGUF imatrix (general.type=imatrix, <name>.in_sum2 and <name>.counts); the output\n" +
			"format follows the extension (.gguf, anything else .dat). GGUF imatrix names of 64 bytes or more are\n" +
			"refused by stock llama.cpp: sdtool warns and suggests .dat.",
		Subcommands: []*cli.Command{
			{
				Name: "show", Usage: "entries, calls, value statistics and the most important columns", ArgsUsage: "FILE",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "top", Value: 5, Usage: "show the `N` most important columns of each entry (--filter picks the entries)"},
					&cli.StringSliceFlag{Name: "filter", Usage: "show only the entries whose names match `REGEX` (repeatable: any of them)"},
					&cli.BoolFlag{Name: "json", Usage: "write JSON (docs/imatrix-json.md)"},
				},
				Action: runImatrixShow,
			},
			{
				Name: "merge", Usage: "combine several files into one", ArgsUsage: "FILE...",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE` (.gguf or .dat)"},
					&cli.StringFlag{Name: "mode", Value: "llama", Usage: "`MODE`: llama (sum squared activations and counts: a call-weighted average) or sdcpp (sum stored mean x ncall values, as sd.cpp loads several --imat-in)"},
					&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
				},
				Action: runImatrixMerge,
			},
			{
				Name: "convert", Usage: "rewrite a file in the other format", ArgsUsage: "FILE",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output `FILE` (.gguf or .dat)"},
					&cli.BoolFlag{Name: "force", Usage: "replace an existing output"},
				},
				Action: runImatrixConvert,
			},
		},
	},
		"sdtool imatrix show testdata/tiny-sd1.imatrix.dat --top 3",
		"sdtool imatrix convert testdata/tiny-sd1.imatrix.dat -o out/tiny-sd1.imatrix.gguf --force",
		"sdtool imatrix merge testdata/tiny-sd1.imatrix.dat out/tiny-sd1.imatrix.gguf -o out/merged.dat --mode sdcpp --force",
	)
	registerNested("imatrix show",
		"sdtool imatrix show testdata/tiny-sd1.imatrix.dat --top 3",
		"sdtool imatrix show testdata/tiny-sd1.imatrix.dat --top 3 --filter 'attn2\\.to_[kv]'",
		"sdtool imatrix show testdata/tiny-sd1.imatrix.dat --json --top 1",
	)
	registerNested("imatrix merge",
		"sdtool imatrix merge testdata/tiny-sd1.imatrix.dat testdata/tiny-sd1.imatrix.dat -o out/twice.dat",
		"sdtool imatrix merge testdata/tiny-sd1.imatrix.dat testdata/tiny-sd1.imatrix.dat -o out/twice.gguf --mode sdcpp",
	)
	registerNested("imatrix convert",
		"sdtool imatrix convert testdata/tiny-sd1.imatrix.dat -o out/tiny-sd1.imatrix.gguf",
		"sdtool imatrix convert out/tiny-sd1.imatrix.gguf -o out/back.dat",
	)
}

// imatrixShowJSON is `imatrix show --json` (docs/imatrix-json.md).
type imatrixShowJSON struct {
	File       string             `json:"file"`
	Chunks     int                `json:"chunks"`
	ChunkSize  int                `json:"chunk_size"`
	Datasets   []string           `json:"datasets"`
	EntryCount int                `json:"entry_count"`
	Entries    []imatrixEntryJSON `json:"entries"`
}

// imatrixEntryJSON is one entry's statistics of the mean squared
// activations; min, mean, max and std are null for an empty entry.
type imatrixEntryJSON struct {
	Name   string              `json:"name"`
	Calls  int                 `json:"calls"`
	Values int                 `json:"values"`
	Min    *float64            `json:"min"`
	Mean   *float64            `json:"mean"`
	Max    *float64            `json:"max"`
	Std    *float64            `json:"std"`
	Top    []imatrixColumnJSON `json:"top"`
}

type imatrixColumnJSON struct {
	Column int     `json:"column"`
	Value  float32 `json:"value"`
}

func showJSON(w io.Writer, file string, m *imatrix.Matrix, names []string, top int) error {
	out := imatrixShowJSON{File: file, Chunks: m.ChunkCount, ChunkSize: m.ChunkSize, Datasets: append([]string{}, m.Datasets...),
		EntryCount: len(m.Entries), Entries: []imatrixEntryJSON{}}
	for _, name := range names {
		e, _ := m.Lookup(name)
		s := imatrix.Summarize(e, top)
		j := imatrixEntryJSON{Name: s.Name, Calls: s.NCall, Values: s.Len, Top: []imatrixColumnJSON{}}
		if s.Len > 0 {
			j.Min, j.Mean, j.Max, j.Std = &s.Min, &s.Mean, &s.Max, &s.Std
		}
		for _, c := range s.Top {
			j.Top = append(j.Top, imatrixColumnJSON{c.Index, c.Value})
		}
		out.Entries = append(out.Entries, j)
	}
	b, err := sonic.ConfigStd.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func runImatrixShow(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("imatrix show: give one FILE")
	}
	m, err := imatrix.Open(c.Args().First())
	if err != nil {
		return err
	}
	if c.Int("top") < 0 {
		return fmt.Errorf("imatrix show: --top %d: want 0 or more", c.Int("top"))
	}
	names, err := filterNames(m.Names(), c.StringSlice("filter"))
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		return showJSON(w, c.Args().First(), m, names, c.Int("top"))
	}
	fmt.Fprintf(w, "%s: %s, %s", c.Args().First(), pipeline.Count(len(m.Entries), "entry", "entries"), pipeline.Count(m.ChunkCount, "chunk", "chunks"))
	if m.ChunkSize > 0 {
		fmt.Fprintf(w, " of %d", m.ChunkSize)
	}
	if len(m.Datasets) > 0 {
		fmt.Fprintf(w, ", datasets %s", strings.Join(m.Datasets, ", "))
	}
	if len(names) < len(m.Entries) {
		fmt.Fprintf(w, "; %d shown (--filter)", len(names))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENTRY\tCALLS\tVALUES\tMIN\tMEAN\tMAX\tSTD\tTOP COLUMNS")
	for _, name := range names {
		e, _ := m.Lookup(name)
		s := imatrix.Summarize(e, c.Int("top"))
		var top []string
		for _, col := range s.Top {
			top = append(top, fmt.Sprintf("%d:%.3g", col.Index, col.Value))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.4g\t%.4g\t%.4g\t%.4g\t%s\n", s.Name, s.NCall, s.Len, s.Min, s.Mean, s.Max, s.Std, strings.Join(top, " "))
	}
	return tw.Flush()
}

func runImatrixMerge(c *cli.Context) error {
	files := c.Args().Slice()
	if len(files) < 1 {
		return errors.New("imatrix merge: give at least one FILE")
	}
	mode, err := imatrix.ParseMergeMode(c.String("mode"))
	if err != nil {
		return fmt.Errorf("imatrix merge: --mode: %v", err)
	}
	var ms []*imatrix.Matrix
	for _, f := range files {
		m, err := imatrix.Open(f)
		if err != nil {
			return err
		}
		if err := m.Validate(f); err != nil {
			return err
		}
		ms = append(ms, m)
	}
	out, err := imatrix.Merge(files, ms, mode)
	if err != nil {
		return err
	}
	return writeImatrix(c, out, files)
}

func runImatrixConvert(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("imatrix convert: give one FILE")
	}
	m, err := imatrix.Open(c.Args().First())
	if err != nil {
		return err
	}
	// NaN, infinite or negative values would be written on unchanged.
	if err := m.Validate(c.Args().First()); err != nil {
		return err
	}
	return writeImatrix(c, m, c.Args().Slice())
}

// writeImatrix writes m to --output (GGUF by extension, else .dat) through
// the pipeline's atomic publish, refusing inputs and, without --force,
// existing files.
func writeImatrix(c *cli.Context, m *imatrix.Matrix, inputs []string) error {
	out := c.String("output")
	if out == "" {
		return errors.New("imatrix: no output: give -o FILE.gguf or -o FILE.dat")
	}
	var long []string
	inputs = append(inputs, readFiles(c)...)
	err := pipeline.WriteAtomic(c.Context, out, pipeline.PublishOptions{Force: c.Bool("force"), Inputs: inputs, Logger: slog.Default()},
		func(w io.Writer) (err error) {
			long, err = imatrix.Encode(w, out, m)
			return err
		})
	if err != nil {
		return err
	}
	if len(long) > 0 {
		slog.Warn("GGUF imatrix names of 64 bytes or more: stock llama.cpp refuses them; write .dat for it",
			"file", out, "count", len(long), "first", long[0])
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s\n", out, pipeline.Count(len(m.Entries), "entry", "entries"))
	return nil
}

// filterNames keeps the names that match any of the regular expressions
// (all names without one).
func filterNames(names, filters []string) ([]string, error) {
	if len(filters) == 0 {
		return names, nil
	}
	var res []*regexp.Regexp
	for _, f := range filters {
		re, err := regexp.Compile(f)
		if err != nil {
			return nil, fmt.Errorf("--filter %q: %v", f, err)
		}
		res = append(res, re)
	}
	var out []string
	for _, n := range names {
		for _, re := range res {
			if re.MatchString(n) {
				out = append(out, n)
				break
			}
		}
	}
	return out, nil
}
