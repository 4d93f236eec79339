package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/refcache"
	"github.com/sdtool/sdtool/infer"
	"github.com/sdtool/sdtool/pipeline"
)

// The reference cache of generate --compare and report: the source's
// renders kept across runs (refcache).

// refCacheEnv names the environment variable that moves the default
// reference cache (tests point it at a scratch folder).
const refCacheEnv = "SDTOOL_REFERENCE_CACHE"

// refCacheMax is the default bound of the reference cache.
const refCacheMax = 2 << 30

// referenceCacheFlags are the reference cache's flags.
func referenceCacheFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "reference-cache", Usage: "`DIR` keeping the reference model's renders (images, final latents, block outputs) by its files' " +
			"identity and the settings, so that the next comparison with the same reference does not render it again; off: none",
			DefaultText: "$" + refCacheEnv + ", else sdtool/references in the user cache folder"},
		&cli.StringFlag{Name: "reference-cache-max", Usage: "`SIZE` the reference cache keeps at most (least recently used renders go first)", DefaultText: "2GiB"},
		&cli.BoolFlag{Name: "clear-reference-cache", Usage: "remove every render in the reference cache first"},
	}
}

// referenceCache opens the reference cache the flags name (nil when off),
// clearing it first when asked.
func referenceCache(c *cli.Context) (*refcache.Cache, error) {
	dir := c.String("reference-cache")
	if dir == "" {
		dir = os.Getenv(refCacheEnv)
	}
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, nil // no cache folder: renders are not kept
		}
		dir = filepath.Join(base, "sdtool", "references")
	}
	if dir == "off" {
		return nil, nil
	}
	rc := &refcache.Cache{Dir: dir, Max: refCacheMax}
	if s := c.String("reference-cache-max"); s != "" {
		n, err := pipeline.ParseBytes(s)
		if err != nil {
			return nil, fmt.Errorf("--reference-cache-max: %w", err)
		}
		rc.Max = n
	}
	if c.Bool("clear-reference-cache") {
		n, err := rc.Clear()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(c.App.ErrWriter, "cleared %s: %s removed\n", dir, pipeline.Count(n, "render", "renders"))
	}
	return rc, nil
}

// renderKey is the cache key of a render of the files with the settings;
// "" (no caching) when a file cannot be read or the cache is off. The
// running program's own identity is part of it, so that a rebuilt sdtool
// renders again.
func renderKey(rc *refcache.Cache, files []string, settings ...any) string {
	if rc == nil {
		return ""
	}
	if exe, err := os.Executable(); err == nil {
		files = append(slices.Clone(files), exe)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sdtool %s", version)
	for _, s := range settings {
		fmt.Fprintf(&b, "\x00%#v", s)
	}
	key, err := refcache.Key(files, b.String())
	if err != nil {
		return ""
	}
	return key
}

// componentPaths lists a model's files, in load order.
func componentPaths(c infer.Components) []string {
	var out []string
	for _, f := range c.Files() {
		_, path, _ := strings.Cut(f, "=")
		out = append(out, path)
	}
	return out
}

// requestSettings is what of a request changes its render (not its callbacks).
func requestSettings(req infer.Request) string {
	return fmt.Sprintf("%q %q %dx%d steps=%d cfg=%g guidance=%g seed=%d rng=%s %s %s blocks=%v",
		req.Prompt, req.Negative, req.Width, req.Height, req.Steps, req.CFGScale, req.Guidance, req.Seed, req.RNG,
		req.Method, req.Scheduler, req.CaptureBlocks)
}

// loadSettings is what of the load options changes a render.
func loadSettings(opt infer.LoadOptions) string {
	var toks []string
	for k, v := range opt.Tokenizers {
		toks = append(toks, k+"="+v)
	}
	slices.Sort(toks)
	return fmt.Sprintf("runtime=%s stored=%v prediction=%s tokenizers=%v", opt.Runtime, opt.StoredLayout, opt.Prediction, toks)
}

// putReference stores a render, saying (not failing) when it cannot.
func putReference(ctx context.Context, c *cli.Context, rc *refcache.Cache, key string, res *infer.Result) {
	if rc == nil || key == "" {
		return
	}
	if err := rc.Put(ctx, key, res); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "warning: the reference cache %s: %v\n", rc.Dir, err)
	}
}
