package synth

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// A layout is a family's reference tensor list at small scale: the real
// tensor names of a released checkpoint (its marker tensors, its kept
// embeddings and heads, and the repeated blocks cut to a few), with the real
// shapes' structure and the widths divided down. Each line is a name and
// its dims; "{i}" in a name repeats the line for blocks 0..Blocks-1 and
// "{j}" for 0..Blocks2-1; a dim is an integer, a symbol of Dims, a
// multiple ("3H") or a sum ("H+M"). Layouts exist so that detection and
// the quantizer's keep-lists are tested on each family's real names.
type layout struct {
	doc     string
	dims    map[string]int
	blocks  int
	blocks2 int
	lines   []string
}

// expand builds the layout's tensors into b.
func (l layout) expand(b *builder) {
	for _, line := range l.lines {
		f := strings.Fields(line)
		name, dims := f[0], f[1:]
		shape := make([]int, len(dims))
		for k, d := range dims {
			shape[k] = l.dim(d, line)
		}
		init := InitWeight
		switch {
		case strings.HasSuffix(name, ".bias"):
			init = InitBias
		case len(shape) == 1:
			init = InitOne
		}
		reps, key := 1, ""
		switch {
		case strings.Contains(name, "{i}"):
			reps, key = l.blocks, "{i}"
		case strings.Contains(name, "{j}"):
			reps, key = l.blocks2, "{j}"
		}
		for r := 0; r < reps; r++ {
			n := name
			if key != "" {
				n = strings.ReplaceAll(name, key, strconv.Itoa(r))
			}
			b.add(n, init, shape...)
		}
	}
}

// dim evaluates one dim token: sums of optionally multiplied symbols or integers.
func (l layout) dim(tok, line string) int {
	total := 0
	for _, term := range strings.Split(tok, "+") {
		if n, err := strconv.Atoi(term); err == nil {
			total += n
			continue
		}
		i := 0
		for i < len(term) && term[i] >= '0' && term[i] <= '9' {
			i++
		}
		mult := 1
		if i > 0 {
			mult, _ = strconv.Atoi(term[:i])
		}
		v, ok := l.dims[term[i:]]
		if !ok {
			panic(fmt.Sprintf("synth: layout line %q: unknown dim %q", line, term))
		}
		total += mult * v
	}
	return total
}

// layoutLinear returns the lines of a linear layer with bias.
func layoutLinear(name, out, in string) []string {
	return []string{name + ".weight " + out + " " + in, name + ".bias " + out}
}

// joinLines joins line groups.
func joinLines(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// layoutArchs are the family layouts, registered into archs under
// "layout-<family>[-<variant>]" by init.
var layoutArchs = map[string]layout{}

// addLayout registers a layout (called from the family_*.go files' init).
func addLayout(name string, l layout) {
	if _, dup := layoutArchs[name]; dup {
		panic("synth: duplicate layout " + name)
	}
	layoutArchs[name] = l
	archs[name] = archDef{doc: l.doc, parts: func(scaler) []component {
		return []component{{"", "diffusion", l.expand}}
	}}
}

// Layouts lists the family layout names ("layout-sd3-large", ...), sorted.
func Layouts() []string {
	var out []string
	for k := range archs {
		if strings.HasPrefix(k, "layout-") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
