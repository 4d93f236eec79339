package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
)

// outputFlags are the flags that name files a command writes; every other
// flag whose placeholder is a FILE or PATH names a file it reads.
var outputFlags = map[string]bool{"output": true, "imatrix-out": true}

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
// read (models are A, B, C or MODEL in merge and lora).
var filePlaceholders = map[string]bool{"FILE": true, "PATH": true, "DIR": true, "FOLDER": true, "MODEL": true, "A": true, "B": true, "C": true}

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
