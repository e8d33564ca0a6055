//go:build cgo

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/conformance"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/spf13/cobra"
)

// cgoEnabled says whether this binary can load generated kernels.
const cgoEnabled = true

func runVerify(c *cobra.Command, args []string, vf verifyFlags) error {
	if len(vf.threads) == 0 {
		return fmt.Errorf("attnc verify: --threads is empty")
	}
	for _, t := range vf.threads {
		if t < 1 {
			return fmt.Errorf("attnc verify: --threads must be at least 1 (got %d)", t)
		}
	}
	vs, err := build.ParseSpecs(args)
	if err != nil {
		return err
	}
	if err := cpurt.Tools(); err != nil {
		return err
	}
	stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
	tmp, err := os.MkdirTemp("", "attnc-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	passed, failed, skipped := 0, 0, 0
	for _, v := range vs {
		if err := lower.Unsupported(v); err != nil {
			fmt.Fprintf(stdout, "skip %s: %v\n", v.Name, err)
			skipped++
			continue
		}
		dir, err := os.MkdirTemp(tmp, v.Name+"-")
		if err != nil {
			return err
		}
		p, f, err := verifyVariant(stdout, stderr, v, dir, vf)
		passed, failed = passed+p, failed+f
		if err != nil {
			fmt.Fprintf(stdout, "FAIL %s: %v\n", v.Name, err)
			failed++
		}
	}
	summary := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if skipped > 0 {
		summary += fmt.Sprintf(" (%d skipped: not supported yet)", skipped)
	}
	fmt.Fprintln(stdout, summary)
	if failed > 0 {
		return errReported
	}
	return nil
}

// verifyVariant builds v into dir and runs its conformance matrix, printing
// one line per result. A build error or a compiler panic is returned, so that
// the remaining variants still run.
func verifyVariant(stdout, stderr io.Writer, v *ir.Variant, dir string, vf verifyFlags) (passed, failed int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	s, err := conformance.Build(v, dir)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	defer func() {
		if cerr := s.Lib.Close(); cerr != nil {
			fmt.Fprintf(stderr, "attnc verify: %s: closing library: %v\n", v.Name, cerr)
		}
	}()
	for _, r := range s.RunAll(vf.threads, vf.seed) {
		fmt.Fprintln(stdout, r.String())
		if r.Pass {
			passed++
		} else {
			failed++
		}
	}
	return passed, failed, nil
}
