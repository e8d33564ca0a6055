// Package cli is the attnc command line: the cobra commands that compile
// paged-KV-cache attention specs (.attn files) into kernels, headers and a
// manifest, and check, explain and verify them. cmd/attnc is Main(); every
// subcommand lives in its own file.
//
// A program builds its own attnc with extra passes the way go/analysis's
// multichecker builds a vet: its main calls
//
//	cli.Main(cli.WithPasses(attnc.Insertion{Before: "inline-defs", Pass: myPass}))
//
// and every command that compiles (build, check, explain, verify, bench,
// sass) runs the pass; `passes` lists it and `build --print-after`
// accepts its name (see examples/custompass).
//
// The commands ask the registered targets for what they offer (package
// targets' hooks: the triple, the worker count, a harness, a machine-code
// check — `attnc sass` is the CUDA target's) instead of naming them. It
// may import every attnc package except codegen and the target packages;
// nothing but main packages imports it.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/passes"
	"github.com/spf13/cobra"
)

// Main runs the attnc command line on os.Args and exits with its status.
func Main(opts ...Option) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(attnc.CommandGCPercent)
	}
	os.Exit(Run(os.Args[1:], os.Stdout, os.Stderr, opts...))
}

// Run executes the command line args and returns the exit status: 0 on
// success, 1 on any error (printed to stderr: an error in a spec as
// file:line:col: message, any other as "attnc <command>: message"), 2 on
// an internal compiler error (a panic, printed with its stack).
func Run(args []string, stdout, stderr io.Writer, opts ...Option) int {
	cfg := &config{}
	for _, o := range opts {
		o(cfg)
	}
	return run(args, stdout, stderr, cfg)
}

// Option configures the command line that Main and Run build.
type Option func(*config)

// WithPasses adds user passes to every pass table, in order, as
// attnc.Options.Insert does: build, check, explain, verify, bench and
// sass compile with them, passes lists them and build --print-after
// accepts their names. A malformed insertion makes every command fail with its
// reason.
func WithPasses(ins ...attnc.Insertion) Option {
	return func(c *config) { c.insert = append(c.insert, ins...) }
}

// config is what the Options set.
type config struct {
	insert []attnc.Insertion
}

// table is target's pass table with the user passes.
func (c *config) table(target string) ([]passes.Pass, error) {
	return attnc.PassTable(target, c.insert)
}

// errReported means the command already printed why it failed; run only
// sets the exit status.
var errReported = errors.New("failed")

// run is Run with its options applied.
func run(args []string, stdout, stderr io.Writer, cfg *config) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "attnc: internal error: %v\n%s", r, debug.Stack())
			fmt.Fprintln(stderr, "This is a bug in attnc; please report it with the spec that triggered it.")
			code = 2
		}
	}()
	if _, err := attnc.PassTables(cfg.insert); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	root := newRootCmd(stdout, stderr, cfg)
	root.SetArgs(args)
	if cmd, err := root.ExecuteC(); err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(stderr, errorText(cmd, err))
		}
		return 1
	}
	return 0
}

// located matches an error that names its place in a spec:
// file:line:col: message.
var located = regexp.MustCompile(`^[^\s:][^:\n]*:[1-9][0-9]*:[1-9][0-9]*: `)

// errorText is how the command line prints err from command c: an error
// located in a spec as file:line:col: message, any other as
// "attnc <command>: message".
func errorText(c *cobra.Command, err error) string {
	msg := err.Error()
	prefix := "attnc"
	if c != nil {
		prefix = c.CommandPath()
	}
	switch {
	case located.MatchString(msg):
		return msg
	case strings.HasPrefix(msg, prefix+":"), strings.HasPrefix(msg, prefix+" "):
	case strings.HasPrefix(msg, "attnc: "):
		msg = prefix + ": " + strings.TrimPrefix(msg, "attnc: ")
	default:
		msg = prefix + ": " + msg
	}
	// A package's own prefix repeating the command's ("attnc bench:
	// bench: ...") says nothing more.
	if c != nil {
		if rest, ok := strings.CutPrefix(msg, prefix+": "+c.Name()+": "); ok {
			msg = prefix + ": " + rest
		}
	}
	return msg
}

func newRootCmd(stdout, stderr io.Writer, cfg *config) *cobra.Command {
	root := &cobra.Command{
		Use:   "attnc",
		Short: "attnc compiles attention kernels over a paged KV cache",
		Long: `attnc compiles attention variants described in .attn spec files into
kernels over a paged KV cache: LLVM IR for the CPU (<variant>.ll), a C header
(<variant>.h) and manifest.json, which records every kernel's symbol, argument
order and dispatch rules.

A typical session:

  attnc check  model.attn                 # is the spec valid and supported?
  attnc build  model.attn -o out          # write out/<variant>.ll, .h, manifest.json
  attnc explain model.attn --q-len 1 --kv-len 4096 --threads 8
  attnc verify model.attn                 # run the kernels against the reference
  attnc bench  [model.attn]               # decode vs stream read, prefill vs FMA peak
  attnc sass   model.attn                 # CUDA machine code: registers, spills, occupancy

The spec language and the generated ABI are specified in DESIGN.md (§3 and §4);
README.md is the guide, docs/ the reference (spec.md, abi.md, cli.md,
semantics.md).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%s: %w\nRun '%s --help' for usage.", c.CommandPath(), err, c.CommandPath())
	})
	root.AddCommand(
		newBenchCmd(cfg),
		newBuildCmd(cfg),
		newCheckCmd(cfg),
		newExplainCmd(cfg),
		newPassesCmd(cfg),
		newVerifyCmd(cfg),
		newVersionCmd(),
	)
	root.AddCommand(newMachineCodeCmds(cfg)...)
	return root
}

// specArgs requires at least one spec file argument.
func specArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s: no spec file given\nUsage: %s", c.CommandPath(), c.UseLine())
	}
	return nil
}

// splitList splits comma-separated flag values, dropping empty items.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
