package merge

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quant"
	"github.com/sdtool/sdtool/tensor"
)

// ParseFloatDType parses the --dtype of a recipe merge: "" (none), f32, f16 or bf16.
func ParseFloatDType(s string) (t formats.DType, set bool, err error) {
	switch strings.ToLower(s) {
	case "":
		return 0, false, nil
	case "f32":
		return formats.F32, true, nil
	case "f16":
		return formats.F16, true, nil
	case "bf16":
		return formats.BF16, true, nil
	}
	return 0, false, option.Errorf("%s %q: want f32, f16 or bf16", option.Name("DType"), s)
}

// picked is one selected tensor of a recipe source.
type picked struct {
	src    int
	file   string
	tensor formats.Tensor
	out    string
}

// PlanRecipe opens the recipe's sources, applies its rules and plans the
// output out (.safetensors or .gguf by extension). dtype ("", f32, f16,
// bf16) asks for ggml-quantized tensors to be decoded to that type; every
// other tensor is copied byte for byte. Every problem of the recipe is
// reported here, before anything is created; on error no input stays open.
func PlanRecipe(r *Recipe, out, dtype string) (_ *pipeline.Plan, err error) {
	p, err := newPlan(out)
	if err != nil {
		return nil, err
	}
	dt, dtSet, err := ParseFloatDType(dtype)
	if err != nil {
		return nil, err
	}
	if len(r.Sources) == 0 {
		return nil, fmt.Errorf("%s: no sources", r.File)
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	models, err := openSources(r, p)
	if err != nil {
		return nil, err
	}
	sel, err := selectTensors(r, models)
	if err != nil {
		return nil, err
	}
	if err := addRecipeOutputs(p, out, models, sel, dt, dtSet); err != nil {
		return nil, err
	}
	p.Header.Metadata = stringMetadata(r.Metadata)
	pipeline.FoldHighDims(p)
	if err := p.Check(); err != nil {
		return nil, err
	}
	return p, nil
}

// openSources opens every source of the recipe, each used by the plan
// (closed with it); the error names every source that failed.
func openSources(r *Recipe, p *pipeline.Plan) ([]formats.Model, error) {
	var errs errList
	models := make([]formats.Model, len(r.Sources))
	for i := range r.Sources {
		path := r.resolve(&r.Sources[i])
		m, err := formats.Open(path)
		if err != nil {
			errs.add(fmt.Errorf("%s: sources[%d]: %w", r.File, i, err))
			continue
		}
		models[i] = m
		p.Use(m)
	}
	return models, errs.err()
}

// selectTensors picks and names every source's tensors and refuses output
// names that two tensors take and sources that select nothing.
func selectTensors(r *Recipe, models []formats.Model) ([]picked, error) {
	var errs errList
	var sel []picked
	byOut := map[string]int{}
	// Conflicts are grouped by the pair of sources, in order of discovery,
	// so that two overlapping includes make one readable error.
	type pair struct{ first, second int }
	var pairs []pair
	conflicts := map[pair][][2]picked{}
	for i := range r.Sources {
		s := &r.Sources[i]
		n := 0
		for _, t := range models[i].Tensors() {
			if !s.Selects(t.Name) {
				continue
			}
			n++
			out, err := s.OutputName(t.Name)
			if err != nil {
				errs.add(fmt.Errorf("%s: sources[%d] (%s): %v", r.File, i, models[i].Path(), err))
				continue
			}
			pk := picked{src: i, file: models[i].Path(), tensor: t, out: out}
			if pk.out == "" {
				errs.add(fmt.Errorf("%s: sources[%d] (%s): tensor %q gets an empty output name", r.File, i, pk.file, t.Name))
				continue
			}
			if j, dup := byOut[pk.out]; dup {
				key := pair{sel[j].src, pk.src}
				if _, seen := conflicts[key]; !seen {
					pairs = append(pairs, key)
				}
				conflicts[key] = append(conflicts[key], [2]picked{pk, sel[j]})
				continue
			}
			byOut[pk.out] = len(sel)
			sel = append(sel, pk)
		}
		if n == 0 {
			errs.add(fmt.Errorf("%s: sources[%d] (%s) selects no tensor: none of its %d tensors matches include %q without matching exclude %q",
				r.File, i, models[i].Path(), len(models[i].Tensors()), s.Include, s.Exclude))
		}
	}
	for _, key := range pairs {
		errs.add(conflictGroup(conflicts[key]))
	}
	return sel, errs.err()
}

// addRecipeOutputs plans the selected tensors, their types decided up
// front by what the output format can hold: copied byte for byte, or
// ggml-quantized ones decoded to dt when it is set.
func addRecipeOutputs(p *pipeline.Plan, out string, models []formats.Model, sel []picked, dt formats.DType, dtSet bool) error {
	var errs errList
	var noGGML, quantized []string
	for _, pk := range sel {
		t := pk.tensor
		typ, how := t.Type, "copy"
		var prod pipeline.Producer
		switch {
		case t.Type.Quantized() && dtSet:
			src := tensor.Plain(models[pk.src], t)
			if err := src.Err(); err != nil {
				errs.add(err)
				continue
			}
			enc, err := quant.Encoder(dt)
			if err != nil {
				errs.add(err)
				continue
			}
			typ, how = dt, "dequantize "+t.Type.String()
			prod = pipeline.Convert(src, dt, pipeline.EncodeRows(dt, enc.Quantize, nil))
		case t.Type.Quantized() && p.Format.Name == "safetensors":
			quantized = append(quantized, fmt.Sprintf("%q (%s, from %s)", t.Name, t.Type, pk.file))
			continue
		case !p.Format.Stores(t.Type):
			noGGML = append(noGGML, fmt.Sprintf("%q (%s, from %s)", t.Name, t.Type, pk.file))
			continue
		default:
			prod = pipeline.Copy(models[pk.src], t)
		}
		src := t
		p.Outputs = append(p.Outputs, pipeline.Output{Name: pk.out, Type: typ, Shape: t.Shape, Producer: prod, Source: &src, Note: how})
	}
	if len(quantized) > 0 {
		errs.add(option.Errorf("%s: %d ggml-quantized tensors cannot be copied into safetensors (pass %s f16, bf16 or f32 to dequantize them): %s",
			out, len(quantized), option.Name("DType"), listSome(quantized)))
	}
	if len(noGGML) > 0 {
		errs.add(fmt.Errorf("%s: %d tensors have types with no ggml type and cannot be written to GGUF: %s",
			out, len(noGGML), listSome(noGGML)))
	}
	return errs.err()
}

// conflict names the tensor and both files that select it.
func conflict(a, b picked) error {
	desc := func(x picked) string {
		if x.tensor.Name == x.out {
			return fmt.Sprintf("sources[%d] %s", x.src, x.file)
		}
		return fmt.Sprintf("sources[%d] %s (as %q)", x.src, x.file, x.tensor.Name)
	}
	return fmt.Errorf("output tensor %q is selected twice: by %s and by %s", a.out, desc(b), desc(a))
}

// conflictGroup is the error for the output names two sources both
// select: conflict's message for one, a count with the first three for more.
func conflictGroup(group [][2]picked) error {
	if len(group) == 1 {
		return conflict(group[0][0], group[0][1])
	}
	a, b := group[0][1], group[0][0]
	var first []string
	for _, g := range group[:min(3, len(group))] {
		first = append(first, strconv.Quote(g[0].out))
	}
	return fmt.Errorf("%d output tensors are selected twice, by sources[%d] %s and by sources[%d] %s: first %s (give one of them an exclude, or a prefix)",
		len(group), a.src, a.file, b.src, b.file, strings.Join(first, ", "))
}

// listSome lists up to ten items and counts the rest.
func listSome(items []string) string {
	const show = 10
	if len(items) <= show {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:show], ", ") + fmt.Sprintf(", and %d more", len(items)-show)
}
