package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/pipeline"
)

// outputFlags are the flags that name files a command writes; every other
// flag whose placeholder is a FILE or PATH names a file it reads.
var outputFlags = map[string]bool{"output": true, "imatrix-out": true, "write-rules": true, "write-type-file": true}

// inPlace names the output flags that may name a file of one input flag:
// generate --imatrix-out continues an --imatrix-in file in place (it is
// read whole before anything is written).
var inPlace = map[string]string{"imatrix-out": "imatrix-in"}

// writtenFile is a file a command writes and what names it in messages:
// its flag ("--output") or a description ("the ladder's manifest").
type writtenFile struct{ by, path string }

// writtenFiles lists the files command c's flags name as outputs.
func writtenFiles(c *cli.Context) []writtenFile {
	var out []writtenFile
	if c.Command == nil {
		return nil
	}
	for _, f := range c.Command.Flags {
		names := f.Names()
		if len(names) > 0 && outputFlags[names[0]] && c.String(names[0]) != "" {
			out = append(out, writtenFile{"--" + names[0], c.String(names[0])})
		}
	}
	return out
}

// checkWritten refuses, before any work, a command whose outputs (its
// output flags, and extra: the images of a prompt file, a ladder's files)
// name one of the files it reads (readFiles and more: a model's other
// shards) or name one file twice, through links too. It is the one check
// for every command; publishing checks each output again.
func checkWritten(c *cli.Context, more []string, extra ...writtenFile) error {
	outs := append(writtenFiles(c), extra...)
	if len(outs) == 0 {
		return nil
	}
	inputs := append(readFiles(c), more...)
	for i, o := range outs {
		for _, p := range outs[:i] {
			if pipeline.SameTarget(o.path, p.path) {
				return fmt.Errorf("%s: named by both %s and %s; each output needs its own file", o.path, p.by, o.by)
			}
		}
		ins := inputs
		if from := inPlace[strings.TrimPrefix(o.by, "--")]; from != "" {
			ins = slices.DeleteFunc(slices.Clone(inputs), func(in string) bool {
				return slices.Contains(c.StringSlice(from), in) && pipeline.SameTarget(in, o.path)
			})
		}
		if err := pipeline.CheckNotInput(o.path, ins); err != nil {
			return fmt.Errorf("%s: %w", o.by, err)
		}
	}
	return nil
}

// maxFolderInputs bounds the files of one input folder (a tokenizer or
// diffusers folder) that are listed as inputs.
const maxFolderInputs = 1024

// readFiles lists every file command c reads, so that no output replaces
// one: its arguments and the values of its file flags (models, components,
// VAEs, imatrix files, recipes, init images, prompt files, tokenizers,
// LoRAs), a FILE:STRENGTH value also without its suffix, and the files of
// an input folder. It is one list for every output of every command, kept
// in step with new flags by reading the flags' placeholders rather than a
// list of names. The paths are only stat'ed by the checks, never opened.
func readFiles(c *cli.Context) []string {
	var vals []string
	if c.Command != nil {
		for _, f := range c.Command.Flags {
			names := f.Names()
			if len(names) == 0 || outputFlags[names[0]] || !namesFile(f) {
				continue
			}
			if _, ok := f.(*cli.StringSliceFlag); ok {
				vals = append(vals, c.StringSlice(names[0])...)
			} else {
				vals = append(vals, c.String(names[0]))
			}
		}
	}
	vals = append(vals, c.Args().Slice()...)
	var out []string
	for _, v := range vals {
		if v == "" {
			continue
		}
		out = append(out, v)
		if i := strings.LastIndexByte(v, ':'); i > 0 {
			out = append(out, v[:i]) // FILE:STRENGTH
		}
		if st, err := os.Stat(v); err == nil && st.IsDir() {
			out = append(out, folderFiles(v)...)
		}
	}
	return out
}

// filePlaceholders are the usage placeholders of flags that name a file
// read (models are A, B, C or MODEL in merge and lora; --types-from is a
// GGUF).
var filePlaceholders = map[string]bool{"FILE": true, "PATH": true, "DIR": true, "FOLDER": true, "MODEL": true, "A": true, "B": true, "C": true, "GGUF": true}

// namesFile reports whether flag f's usage placeholder names a file.
func namesFile(f cli.Flag) bool {
	d, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return false
	}
	_, rest, ok := strings.Cut(d.GetUsage(), "`")
	if !ok {
		return false
	}
	name, _, _ := strings.Cut(rest, "`")
	name, _, _ = strings.Cut(name, "[")
	return filePlaceholders[name]
}

// folderFiles lists the files of dir and of its direct subfolders (a
// diffusers folder keeps its weights one level down), at most
// maxFolderInputs of them.
func folderFiles(dir string) []string {
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if len(out) >= maxFolderInputs {
			break
		}
		p := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			out = append(out, p)
			continue
		}
		sub, _ := os.ReadDir(p)
		for _, s := range sub {
			if len(out) >= maxFolderInputs {
				break
			}
			if !s.IsDir() {
				out = append(out, filepath.Join(p, s.Name()))
			}
		}
	}
	return out
}
