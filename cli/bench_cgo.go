//go:build cgo

package cli

import (
	"fmt"
	"os"

	"github.com/attnc/attnc/bench"
	"github.com/attnc/attnc/build"
	"github.com/attnc/attnc/lower"
	"github.com/spf13/cobra"
)

func runBench(c *cobra.Command, args []string, bf benchFlags) error {
	vs, err := build.ParseSpecs(args)
	if err != nil {
		return err
	}
	builder, err := suiteBuilder("attnc bench", bf.target, bf.gpu, "", bf.cfg)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "attnc-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	stdout := c.OutOrStdout()
	opts := bench.Options{Batch: bf.batch, KVLen: bf.kvLen, QLen: bf.qLen, Threads: bf.threads, Seconds: bf.seconds, Seed: bf.seed}
	failed := false
	for _, v := range vs {
		if err := lower.Unsupported(v); err != nil {
			fmt.Fprintf(stdout, "skip %s: %v\n", v.Name, err)
			continue
		}
		dir, err := os.MkdirTemp(tmp, v.Name+"-")
		if err != nil {
			return err
		}
		s, err := builder(v, dir)
		if err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "attnc bench: %s: build: %v\n", v.Name, err)
			failed = true
			continue
		}
		r, err := bench.Run(s, opts)
		s.Close()
		if err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "attnc bench: %s: %v\n", v.Name, err)
			failed = true
			continue
		}
		fmt.Fprint(stdout, r.String())
	}
	if failed {
		return errReported
	}
	return nil
}
