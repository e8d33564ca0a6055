// Command attnc compiles paged-KV-cache attention specs (.attn files) into
// kernels, headers and a manifest, and checks, explains and verifies them.
// Every subcommand lives in its own file; run `attnc help` for the list.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// errReported means the command already printed why it failed; run only
// sets the exit status.
var errReported = errors.New("failed")

// run executes the command line args and returns the exit status: 0 on
// success, 1 on any error (printed as-is to stderr), 2 on an internal
// compiler error (a panic, printed with its stack).
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "attnc: internal error: %v\n%s", r, debug.Stack())
			fmt.Fprintln(stderr, "This is a bug in attnc; please report it with the spec that triggered it.")
			code = 2
		}
	}()
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	return 0
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
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

The spec language and the generated ABI are described in DESIGN.md (§3 and §4)
and summarized in README.md.`,
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
		newBenchCmd(),
		newBuildCmd(),
		newCheckCmd(),
		newExplainCmd(),
		newPassesCmd(),
		newSASSCmd(),
		newVerifyCmd(),
		newVersionCmd(),
	)
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
