package inspect

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/bytedance/sonic"
	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/formats/gguf"
	"github.com/sdtool/sdtool/pipeline"
)

// Text-mode shortening of metadata values.
const (
	// ShortArray is the number of array elements shown before "... (N more)".
	ShortArray = 8
	// ShortString is the number of bytes of a string shown before "... (N more bytes)".
	ShortString = 160
)

// WriteText writes s for people: the summary, then (unless empty) the tensor table.
func WriteText(w io.Writer, s *Summary) error {
	ew := &errWriter{w: cleanWriter{w}}
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	writeFacts(ew, s)
	if len(s.Warnings) > 0 {
		p("  warnings:\n")
		for _, m := range s.Warnings {
			p("    %s\n", Clean(m))
		}
	}
	writeComponents(ew, s)
	if s.Adapter != nil {
		writeAdapter(ew, s.Adapter)
	}
	writeTypes(ew, s)
	writeLimits(ew, s)
	if len(s.Metadata) > 0 {
		p("  metadata (%d):\n", len(s.Metadata))
		for _, e := range s.Metadata {
			p("    %s = %s\n", Clean(e.Key), shortValue(e))
		}
	}
	if len(s.Filter) > 0 {
		p("  filter %s: %d of %d tensors\n", strings.Join(s.Filter, " | "), s.Matched, s.TensorCount)
	}
	if len(s.Tensors) > 0 {
		p("\n")
		writeTensors(ew, s)
	}
	return ew.err
}

// writeFacts writes the path and the file's facts: format, layout, sizes
// and family.
func writeFacts(ew io.Writer, s *Summary) {
	fmt.Fprintf(ew, "%s\n", s.Path)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s:\t%s\n", k, v) }
	format := s.Format
	if s.Version != 0 {
		format += " v" + strconv.Itoa(s.Version)
	}
	row("format", format)
	if s.Alignment != 0 {
		row("alignment", strconv.Itoa(s.Alignment))
	}
	row("data offset", thousands(s.DataOffset))
	if len(s.Files) > 1 {
		row("files", fmt.Sprintf("%d shards: %s", len(s.Files), strings.Join(s.Files, ", ")))
	}
	row("tensors", thousands(int64(s.TensorCount)))
	row("parameters", fmt.Sprintf("%s (%s)", thousands(s.ParamCount), humanCount(s.ParamCount)))
	row("tensor data", fmt.Sprintf("%s bytes (%s)", thousands(s.TotalBytes), pipeline.HumanBytes(s.TotalBytes)))
	row("architecture", s.Architecture.Name)
	if f := s.Architecture.Main(); f != nil {
		row("family", familyLine(f, s.Architecture.Variant(), s.Architecture.SDCppModel()))
	}
	tw.Flush()
}

// writeComponents writes the model's components and the count of tensors
// in none.
func writeComponents(ew io.Writer, s *Summary) {
	if len(s.Architecture.Components) > 0 {
		fmt.Fprintf(ew, "  components:\n")
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		for _, c := range s.Architecture.Components {
			name := c.Name
			if c.Variant != "" {
				name += " (" + c.Variant + ")"
			}
			prefix := c.Prefix
			if prefix == "" {
				prefix = "(no prefix)"
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s params\t%s\n", name, c.Kind, prefix,
				plural(c.Tensors, "tensor"), humanCount(c.Params), pipeline.HumanBytes(c.Bytes))
		}
		tw.Flush()
	}
	if s.Architecture.Unassigned > 0 {
		fmt.Fprintf(ew, "  other tensors: %d (no recognised component)\n", s.Architecture.Unassigned)
	}
}

// writeTypes writes the tensor types and the ComfyUI quantized modules.
func writeTypes(ew io.Writer, s *Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	if len(s.Types) > 0 {
		p("  types:\n")
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		for _, t := range s.Types {
			fmt.Fprintf(tw, "    %s\t%s\t%s params\t%s\t%.2f%%\n", t.Type, plural(t.Tensors, "tensor"),
				humanCount(t.Params), pipeline.HumanBytes(t.Bytes), t.Percent)
		}
		tw.Flush()
	}
	if len(s.ComfyQuant) > 0 {
		p("  ComfyUI quantized modules: %d\n", len(s.ComfyQuant))
		for _, q := range s.ComfyQuant {
			if q.Error != "" {
				p("    %s: %s\n", q.Module, q.Error)
				continue
			}
			p("    %s: %s  %s\n", q.Module, q.Settings, q.JSON)
		}
	}
}

// writeLimits writes the names and ranks that some GGUF readers refuse.
func writeLimits(ew io.Writer, s *Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	if ln := s.LongNames; ln.Count > 0 {
		p("  long names: %s of %d bytes or more (longest %d); stock ggml refuses names of %d bytes or more; sd.cpp accepts up to %d, ComfyUI-GGUF %d",
			plural(ln.Count, "name"), gguf.GGMLMaxName, ln.Longest, gguf.GGMLMaxName, gguf.SDCppMaxName, gguf.ComfyGGUFMaxName)
		if ln.OverComfyGGUF > 0 || ln.OverSDCpp > 0 {
			p(" (%d over ComfyUI-GGUF's limit, %d over sd.cpp's)", ln.OverComfyGGUF, ln.OverSDCpp)
		}
		p("\n")
	}
	if len(s.HighRank) > 0 {
		p("  more than %d dims: %s (%s); ggml's GGUF reader refuses them, sd.cpp folds 5-D to 4-D, ComfyUI-GGUF reads them\n",
			gguf.GGMLMaxDims, plural(len(s.HighRank), "tensor"), strings.Join(firstN(s.HighRank, 3), ", "))
	}
}

// writeTensors writes the tensor table, streamed (writeTable), not
// buffered: the table of a header of 500k tensors would hold its whole
// text and cells at once.
func writeTensors(ew io.Writer, s *Summary) {
	files := len(s.Files) > 1
	writeTable(ew, len(s.Tensors), func(i int, cells []string) []string {
		if i < 0 {
			cells = append(cells, "NAME", "TYPE", "SHAPE", "SIZE", "OFFSET")
			if files {
				cells = append(cells, "FILE")
			}
			return cells
		}
		t := &s.Tensors[i]
		cells = append(cells, Clean(t.Name), t.Type, formats.FormatShape(t.Shape), strconv.FormatInt(t.Size, 10), strconv.FormatInt(t.Offset, 10))
		if files {
			cells = append(cells, t.File)
		}
		return cells
	})
}

// WriteJSON writes one summary as a JSON object, or several as an array.
func WriteJSON(w io.Writer, ss []*Summary) error {
	var v any = ss
	if len(ss) == 1 {
		v = ss[0]
	}
	b, err := sonic.ConfigStd.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// shortValue renders a metadata value on one line, shortening long arrays
// and strings.
func shortValue(e MetaEntry) string {
	if s, ok := e.Value.(string); ok {
		if e.Type == "string" {
			return shortString(s)
		}
		return s // a non-finite float
	}
	rv := reflect.ValueOf(e.Value)
	if rv.Kind() != reflect.Slice {
		return fmt.Sprint(e.Value)
	}
	n := rv.Len()
	var parts []string
	for i := 0; i < n && i < ShortArray; i++ {
		el := rv.Index(i).Interface()
		if s, ok := el.(string); ok && e.ElemType == "string" {
			parts = append(parts, strconv.Quote(truncate(s, 40)))
		} else {
			parts = append(parts, fmt.Sprint(el))
		}
	}
	out := "[" + strings.Join(parts, ", ")
	if n > ShortArray {
		out += fmt.Sprintf(", ... (%d more)", n-ShortArray)
	}
	return out + "]"
}

func firstN(list []string, n int) []string {
	if len(list) <= n {
		return list
	}
	return append(list[:n:n], fmt.Sprintf("... (%d more)", len(list)-n))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func shortString(s string) string {
	more := 0
	if len(s) > ShortString {
		cut := ShortString
		for cut > 0 && s[cut]&0xc0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		more = len(s) - cut
		s = s[:cut]
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		s = strconv.Quote(s)
	}
	if more > 0 {
		s += fmt.Sprintf("... (%d more bytes)", more)
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return thousands(int64(n)) + " " + what + "s"
}

// thousands writes n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// familyLine describes a family in one line: its title and variant, the
// names ComfyUI-GGUF and sd.cpp know it by, and whether generate runs it.
func familyLine(f *family.Family, variant, sdcpp string) string {
	out := f.Title
	if variant != "" {
		out += " (" + variant + ")"
	}
	or := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	gen := "no (convert and quantize only)"
	if f.Generate {
		gen = "yes"
	}
	return fmt.Sprintf("%s; ComfyUI-GGUF: %s; sd.cpp: %s; generate: %s", out, or(f.ComfyArch), or(sdcpp), gen)
}

// WriteMetadata writes the summary's metadata, one "KEY  TYPE  VALUE" line
// per key in file order, values shortened as WriteText shortens them.
func WriteMetadata(w io.Writer, s *Summary) error {
	ew := &errWriter{w: cleanWriter{w}}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	for _, e := range s.Metadata {
		typ := e.Type
		if e.ElemType != "" {
			typ = fmt.Sprintf("%s[%s; %d]", e.Type, e.ElemType, e.Count)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", Clean(e.Key), typ, shortValue(e))
	}
	tw.Flush()
	return ew.err
}
