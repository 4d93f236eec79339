package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/quantize"
)

// reportTypeFlags are report's flags for judging types without a ladder on
// disk: the source is quantized to each type in turn.
func reportTypeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "type", Usage: "quantize the source to each of these `TYPES` (a list, as quantize --type A,B,...) one at a time " +
			"and report each: a file is written beside the report while it is judged and removed after, so the disk holds one at a time " +
			"(to keep the files, run quantize's ladder and report its manifest)"},
		&cli.StringSliceFlag{Name: "imatrix", Usage: "importance matrix `FILE` the --type files are quantized with (repeatable), as quantize --imatrix"},
	}
}

// typeLadder is a report's ladder of types quantized on demand (--type):
// the rungs are planned up front, so that every problem of every type is
// found before anything renders, and each is written only when measured.
type typeLadder struct {
	l     *quantize.Ladder
	names []string // each rung's name in the report: SOURCE-TYPE.EXT
	ro    pipeline.Options
}

// planTypeLadder plans the --type rungs of src as hidden files in dir (the
// report's folder) and returns the manifest report iterates over.
func planTypeLadder(c *cli.Context, src, dir string, threads int) (*typeLadder, *quantize.Manifest, error) {
	if c.NArg() != 1 {
		return nil, nil, fmt.Errorf("report: --type quantizes one source model; got %s", pipeline.Count(c.NArg(), "argument", "arguments"))
	}
	if c.String("model") != "" {
		return nil, nil, errors.New("report: with --type, the source is the argument; -m names the source of a manifest")
	}
	types, err := quantize.SplitTypes(c.String("type"))
	if err != nil {
		return nil, nil, fmt.Errorf("--type: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(src), filepath.Ext(src))
	// The process id keeps two reports in one folder apart; the leading dot
	// keeps the files out of listings while they exist.
	pattern := filepath.Join(dir, "."+base+"-{type}.rung"+strconv.Itoa(os.Getpid())+".{ext}")
	opts := &quantize.Options{Input: src, Output: pattern, Imatrix: c.StringSlice("imatrix"), Log: slog.Default()}
	l, err := quantize.PlanLadder(opts, types)
	if err != nil {
		return nil, nil, fmt.Errorf("report: %w", err)
	}
	tl := &typeLadder{l: l, ro: pipeline.Options{Threads: threads, Logger: slog.Default()}}
	man := &quantize.Manifest{Source: quantize.ManifestSource{File: src}}
	for _, r := range l.Rungs {
		name := base + "-" + r.Type + filepath.Ext(r.Plan.Path)
		tl.names = append(tl.names, name)
		man.Files = append(man.Files, quantize.ManifestFile{File: name, Type: r.Type})
	}
	return tl, man, nil
}

// paths are the rungs' files, for the report's check of outputs against inputs.
func (tl *typeLadder) paths() []writtenFile {
	var out []writtenFile
	for _, r := range tl.l.Rungs {
		out = append(out, writtenFile{"the " + r.Type + " file", r.Plan.Path})
	}
	return out
}

// writeRung quantizes rung i and returns its path, its manifest entry (size,
// type and bits per weight as written) and the function that removes it.
func (r *reportRun) writeRung(i int) (string, quantize.ManifestFile, func(), error) {
	tl := r.types
	rung := tl.l.Rungs[i]
	path := rung.Plan.Path
	remove := func() { os.Remove(path) }
	fmt.Fprintf(r.c.App.ErrWriter, "quantizing %s to %s for the report\n", r.src, rung.Type)
	bar := console.New("quantize "+rung.Type, 0)
	ro := tl.ro
	ro.Progress = bar.Update
	if err := pipeline.Run(r.ctx, rung.Plan, ro); err != nil {
		bar.Abandon()
		remove()
		return "", quantize.ManifestFile{File: tl.names[i], Type: rung.Type}, nil, err
	}
	bar.Finish()
	mf, err := describeFile(path)
	mf.File, mf.Type = tl.names[i], rung.Type
	return path, mf, remove, err
}
