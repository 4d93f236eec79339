package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sdtool/sdtool/cmd/sdtool/internal/console"
	"github.com/sdtool/sdtool/formats"
	"github.com/sdtool/sdtool/internal/option"
)

// version is the release version; release builds set it with
// -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	// --version only: -v means verbose everywhere.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
}

// versionString is what --version prints: the module version of the build
// (v1.2.3 for go install ...@v1.2.3, a pseudo-version from the VCS for a
// build in a checkout), the VCS revision when the build recorded one, and
// the Go version.
func versionString() string {
	info, _ := debug.ReadBuildInfo()
	return formatVersion(version, info)
}

// formatVersion is versionString for a given -X main.version value and
// build information (nil when the binary has none).
func formatVersion(v string, info *debug.BuildInfo) string {
	if info == nil {
		return v
	}
	if mv := info.Main.Version; v == "dev" && mv != "" && mv != "(devel)" {
		v = mv
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	var extra []string
	if rev != "" {
		extra = append(extra, "revision "+rev[:min(12, len(rev))]+dirty)
	} else if v == "dev" {
		// go run, go test and -buildvcs=false record no revision.
		extra = append(extra, "no VCS revision recorded")
	}
	if info.GoVersion != "" {
		extra = append(extra, info.GoVersion)
	}
	if len(extra) == 0 {
		return v
	}
	return v + " (" + strings.Join(extra, ", ") + ")"
}

// subcommand is a registered subcommand with the examples its help shows.
type subcommand struct {
	cmd      *cli.Command
	examples []string
}

// subcommands holds what each subcommand file registers from init.
var subcommands []subcommand

// register adds a subcommand. Every example is a complete command line,
// run as written by the test in this package from a copy of the repository's
// testdata (so examples must work there, and may write files).
func register(cmd *cli.Command, examples ...string) {
	subcommands = append(subcommands, subcommand{cmd: cmd, examples: examples})
}

// nestedExamples holds the examples of nested commands ("imatrix show"),
// by their path below sdtool.
var nestedExamples = map[string][]string{}

// registerNested gives the nested command at path ("imatrix show") the
// examples its help shows, run by the same test as register's.
func registerNested(path string, examples ...string) {
	nestedExamples[path] = examples
}

func verboseFlag() cli.Flag {
	return &cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log details (debug level) to stderr"}
}

// newApp builds the application writing to stdout and stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:    "sdtool",
		Usage:   "inspect, convert and quantize diffusion-model weights",
		Version: versionString(),
		Writer:  stdout, ErrWriter: stderr,
		Flags:                     []cli.Flag{verboseFlag()},
		DisableSliceFlagSeparator: true,
		// Errors are printed once, by run, as "sdtool: message".
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   usageError,
		Before:         func(c *cli.Context) error { setupLogging(c, stderr); return nil },
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				var names []string
				for _, cmd := range c.App.Commands {
					names = append(names, cmd.Name)
				}
				return fmt.Errorf("unknown command %q%s (see sdtool help)", c.Args().First(), didYouMean(c.Args().First(), names, ""))
			}
			return cli.ShowAppHelp(c)
		},
	}
	list := append([]subcommand(nil), subcommands...)
	sort.Slice(list, func(i, j int) bool { return list[i].cmd.Name < list[j].cmd.Name })
	for _, sc := range list {
		app.Commands = append(app.Commands, prepare(sc.cmd, sc.cmd.Name, sc.examples, stderr))
	}
	return app
}

// prepare returns a copy of cmd (so that building several apps, as tests
// do, never stacks flags twice) with what every command of sdtool has, at
// every depth: -v, sdtool's usage errors, logging set up before the
// action, and its examples in the help; nested commands get the same.
func prepare(cmd *cli.Command, path string, examples []string, stderr io.Writer) *cli.Command {
	c := *cmd
	c.Flags = append(append([]cli.Flag(nil), c.Flags...), verboseFlag())
	c.OnUsageError = usageError
	before := c.Before
	c.Before = func(ctx *cli.Context) error {
		setupLogging(ctx, stderr)
		if err := checkWritten(ctx, nil); err != nil {
			return err
		}
		if before != nil {
			return before(ctx)
		}
		return nil
	}
	tmpl := cli.CommandHelpTemplate
	if len(c.Subcommands) > 0 {
		// The template that lists the nested commands.
		tmpl = cli.SubcommandHelpTemplate
	}
	if len(examples) > 0 {
		c.CustomHelpTemplate = tmpl + examplesSection(examples)
	} else if len(c.Subcommands) > 0 {
		c.CustomHelpTemplate = tmpl
	}
	if len(cmd.Subcommands) > 0 && c.Action == nil {
		// urfave/cli answers an unknown nested command with "No help topic".
		c.Action = func(ctx *cli.Context) error {
			if !ctx.Args().Present() {
				return cli.ShowSubcommandHelp(ctx)
			}
			var names []string
			for _, sub := range cmd.Subcommands {
				names = append(names, sub.Name)
			}
			return fmt.Errorf("unknown command %q%s (see sdtool %s --help)", path+" "+ctx.Args().First(), didYouMean(ctx.Args().First(), names, path+" "), path)
		}
	}
	c.Subcommands = nil
	for _, sub := range cmd.Subcommands {
		p := path + " " + sub.Name
		c.Subcommands = append(c.Subcommands, prepare(sub, p, nestedExamples[p], stderr))
	}
	return &c
}

// examplesHeader starts the examples section of a subcommand's help; each
// example follows on its own line as "   $ sdtool ...".
const examplesHeader = "EXAMPLES:"

func examplesSection(examples []string) string {
	var b strings.Builder
	b.WriteString("\n" + examplesHeader + "\n")
	for _, e := range examples {
		// The help is a text/template: keep any "{{" literal.
		b.WriteString("   $ " + strings.ReplaceAll(e, "{{", `{{"{{"}}`) + "\n")
	}
	return b.String()
}

// goFlagMessage and goFlagValue match the errors of Go's flag package,
// which urfave/cli passes on with the flag spelt with one dash whatever the
// user typed.
var (
	goFlagMessage = regexp.MustCompile(`^(flag provided but not defined|flag needs an argument): -{1,2}(\S+)$`)
	goFlagValue   = regexp.MustCompile(`^invalid (?:boolean )?value "([^"]*)" for (?:flag )?-{1,2}([^\s:]+): (.*)$`)
)

// didYouMean returns " (did you mean X?)" with the names of valid that
// formats.Suggest finds for name, each after prefix; "" when none is close.
func didYouMean(name string, valid []string, prefix string) string {
	s := formats.Suggest(name, valid)
	if len(s) == 0 {
		return ""
	}
	for i := range s {
		s[i] = prefix + s[i]
	}
	return fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
}

// flagNames lists the long names of the flags of the command c runs (the
// app's when it is none).
func flagNames(c *cli.Context) []string {
	flags := c.App.Flags
	if c.Command != nil {
		flags = c.Command.Flags
	}
	var out []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) > 1 {
				out = append(out, n)
			}
		}
	}
	return out
}

// usageError rewrites a flag-parsing error in sdtool's wording, naming the
// flag as it is spelt (--name, or -x for one letter) and suggesting the
// command's flag it was probably meant to be.
func usageError(c *cli.Context, err error, _ bool) error {
	dashed := func(name string) string {
		if len(name) == 1 {
			return "-" + name
		}
		return "--" + name
	}
	if m := goFlagMessage.FindStringSubmatch(err.Error()); m != nil {
		if m[1] == "flag needs an argument" {
			return fmt.Errorf("%s needs a value", dashed(m[2]))
		}
		hint := ""
		if c != nil && len(m[2]) > 1 {
			hint = didYouMean(m[2], flagNames(c), "--")
		}
		return fmt.Errorf("unknown flag %s%s (see --help)", dashed(m[2]), hint)
	}
	if m := goFlagValue.FindStringSubmatch(err.Error()); m != nil {
		why := m[3]
		if why == "parse error" {
			why = "not a valid value"
		}
		return fmt.Errorf("%s %q: %s", dashed(m[2]), m[1], why)
	}
	return err
}

func setupLogging(c *cli.Context, stderr io.Writer) {
	level := slog.LevelWarn
	// -v may be given globally or to the subcommand: each context of the
	// lineage answers for its own flag set first.
	for _, cc := range c.Lineage() {
		if cc.Bool("verbose") {
			level = slog.LevelDebug
		}
	}
	slog.SetDefault(slog.New(console.NewLogHandler(stderr, level)))
}

// run runs the command line args (args[0] is the program name) and returns
// the exit status: 0, or 1 after printing "sdtool: <message>" on one line.
func run(args []string, stdout, stderr io.Writer) int {
	if err := checkCPU(); err != nil {
		fmt.Fprintf(stderr, "sdtool: %s\n", oneLine(err))
		return 1
	}
	app := newApp(stdout, stderr)
	if err := app.Run(llamaQuantizeOrder(normalizeArgs(app, args))); err != nil {
		fmt.Fprintf(stderr, "sdtool: %s\n", oneLine(err))
		return 1
	}
	return 0
}

// oneLine is the message of an error on one line, the engine's options
// it names written as the flags that set them.
func oneLine(err error) string {
	var ec cli.ExitCoder
	msg := option.Phrase(err, flagOf)
	if errors.As(err, &ec) && msg == "" {
		msg = fmt.Sprintf("exit status %d", ec.ExitCode())
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
}

// normalizeArgs lets flags follow positional arguments, which urfave/cli v2
// does not: the global flags before the subcommand are kept, and the
// subcommand's own arguments are reordered by reorderArgs using that
// subcommand's flag definitions (recursively for nested subcommands).
func normalizeArgs(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	flags := append([]cli.Flag{cli.HelpFlag, cli.VersionFlag}, app.Flags...)
	cmds := app.Commands
	for {
		// Skip the flags that precede the (sub)command name.
		i := 0
		for i < len(rest) && rest[i] != "--" && isFlag(rest[i]) {
			if takesValue(flags, rest[i]) && !strings.Contains(rest[i], "=") {
				i++
			}
			i++
		}
		if i >= len(rest) || rest[i] == "--" {
			return append(out, rest...)
		}
		out = append(out, rest[:i]...)
		cmd := findCommand(cmds, rest[i])
		if cmd == nil {
			return append(out, rest[i:]...)
		}
		out = append(out, rest[i])
		rest = rest[i+1:]
		if len(cmd.Subcommands) == 0 {
			return append(out, reorderArgs(append([]cli.Flag{cli.HelpFlag}, cmd.Flags...), rest)...)
		}
		flags = append([]cli.Flag{cli.HelpFlag}, cmd.Flags...)
		cmds = cmd.Subcommands
	}
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// negativeNumber matches arguments such as -1, -0.5 or -1e-3, which are
// values, never flags.
var negativeNumber = regexp.MustCompile(`^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$`)

func isFlag(a string) bool {
	return len(a) > 1 && a[0] == '-' && !negativeNumber.MatchString(a)
}

// flagName returns the name of a flag argument without dashes and value.
func flagName(a string) string {
	name := strings.TrimLeft(a, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	return name
}

// takesValue reports whether the flag argument a names a flag that
// consumes the next argument. Unknown flags are assumed to take none, so
// that the parser reports them.
func takesValue(flags []cli.Flag, a string) bool {
	name := flagName(a)
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if d, ok := f.(cli.DocGenerationFlag); ok {
				return d.TakesValue()
			}
			return false
		}
	}
	return false
}

// reorderArgs moves every flag (with its value) in front of the positional
// arguments, keeping the order within each, so that "IN -o OUT --type q4_K"
// parses like "-o OUT --type q4_K IN". "--" ends the flags: everything after
// it is positional. Flag values are taken as given, so "--seed -1" works,
// and a lone negative number that is not a defined flag is positional.
func reorderArgs(flags []cli.Flag, args []string) []string {
	var fl, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !isFlag(a) || a == "-" {
			pos = append(pos, a)
			continue
		}
		fl = append(fl, a)
		if takesValue(flags, a) && !strings.Contains(a, "=") {
			if i+1 == len(args) {
				// The value is missing: end with the flag alone so that the
				// parser reports it (before a "--" it would take that as its value).
				return fl
			}
			i++
			fl = append(fl, args[i])
		}
	}
	if len(pos) == 0 {
		return fl
	}
	// "--" keeps positionals that look like flags (or negative numbers) positional.
	return append(append(fl, "--"), pos...)
}
