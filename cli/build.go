package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

func newBuildCmd(cfg *config) *cobra.Command {
	var (
		targetList []string
		triple     string
		cpuLevels  []string
		outDir     string
		shared     bool
		verifyEach bool
		printAfter string
		dumpDir    string
		depfile    string
	)
	c := &cobra.Command{
		Use:   "build SPEC... -o DIR",
		Short: "Compile specs into kernels, headers and manifest.json",
		Long: `Compile every variant of the given .attn spec files and write, into DIR:

  <variant>.ll    LLVM 14 IR of the CPU kernels (target cpu)
  <variant>.cu    CUDA C++ kernels and host launchers (target cuda)
  <variant>.h     C prototypes of every entry point, status codes and
                  (with cpu) <variant>_strerror/_set_num_threads/_get_num_threads
  manifest.json   ABI version, every kernel's symbol, argument order,
                  shapes and constraints, and the dispatch rules

The files are byte-identical on every run and machine, so they can be
checked in or cached. Variant names must be unique across all SPEC files.
They are written into a staging directory inside DIR and moved into place
together, manifest.json last: a build that fails leaves DIR as it was, and
files in DIR that the build does not write are left alone. A symlink at an
output path is replaced by the file, never written through.

--target takes a comma list of code generators (default cpu; the flag's
description below lists the known ones). --triple chooses the CPU the .ll
is for: x86_64-unknown-linux-gnu (default) or aarch64-unknown-linux-gnu
(the same loops, vectorized for NEON by opt -O3); the manifest records it.
--cpu-levels takes a comma list of the triple's CPU levels (x86-64,
x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-amx; neon on aarch64) or
host, the best level of the machine that builds: the work kernels are
cloned for those levels only, instead of every level of the triple (a
kernel a level would not change takes the best level below it), so the .ll
is smaller and compiles faster. The entries still pick the best level the
CPU runs at their first call; on a CPU below every level built they
return CPU_LEVEL and <variant>_cpu_level() returns NULL. The manifest
lists the levels built (targets.cpu.levels).
--shared also links DIR/<variant>.so from each .ll with opt -O3, llc and
gcc (LLVM 14 tools required; for aarch64, -mtriple and
aarch64-linux-gnu-gcc), ready for dlopen or linking.

To see what the compiler does, --print-after=all (or a pass name from
'attnc passes') prints the kernel IR after each pass to stderr,
--dump-dir=DIR writes it to DIR/<variant>.NN-<pass>.ir files, and
--verify-each runs the IR verifier after every pass.

--depfile FILE writes the build's dependencies in make's format (as
gcc -MD, protoc --dependency_out): every file written depends on every
spec file given, and each spec gets an empty rule of its own, so a deleted
spec does not stop make. Make, Ninja (depfile = ...) and CMake
(DEPFILE) then rebuild the kernels when a spec changes.

Errors in a spec are printed as file:line:col: message; attnc exits with
status 1 on any error.`,
		Example: `  attnc build examples/llama3_8b.attn -o out
  attnc build a.attn b.attn --target cpu -o out --shared
  attnc build examples/llama3_8b.attn --triple aarch64-unknown-linux-gnu -o out-arm64
  attnc build examples/llama3_8b.attn -o out --shared --cpu-levels host
  attnc build examples/llama3_8b.attn -o out --cpu-levels x86-64,x86-64-v4
  attnc build examples/llama3_8b.attn -o out --depfile out/kernels.d
  attnc build examples/llama3_8b.attn -o out --print-after=classify-tiles 2>ir.txt
  go run ./cmd/attnc build examples/llama3_8b.attn --target cpu -o out`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if outDir == "" {
				return fmt.Errorf("attnc build: -o DIR is required")
			}
			ts, err := parseTargets(targetList)
			if err != nil {
				return err
			}
			// --shared links the .ll files of the target that takes
			// triples (the cpu target) with the triple's toolchain.
			tt := tripleTarget()
			if shared && !slices.Contains(ts, tt) {
				return fmt.Errorf("attnc build: --shared links the %s target's .ll files; add %s to --target", tt, tt)
			}
			if err := checkPassName(printAfter, ts, cfg); err != nil {
				return err
			}
			if triple != "" && !slices.Contains(ts, tt) {
				return fmt.Errorf("attnc build: --triple applies to the %s target; add %s to --target", tt, tt)
			}
			if tr, ok := targets.TripleTarget().(targets.Triples); ok {
				if err := tr.CheckTriple(triple); err != nil {
					return fmt.Errorf("attnc build: --triple: %w", err)
				}
			}
			if cpuLevels, err = cpuLevelsFlag(c, "attnc build", cpuLevels, slices.Contains(ts, tt), triple, "add "+tt+" to --target"); err != nil {
				return err
			}
			var tc *cpurt.Toolchain
			if shared {
				if tc, err = cpurt.ToolchainFor(triple); err != nil {
					return fmt.Errorf("attnc build --shared: %w", err)
				}
			}
			out, err := attnc.CompileFiles(args, attnc.Options{
				Targets:    ts,
				Triple:     triple,
				CPULevels:  cpuLevels,
				Insert:     cfg.insert,
				VerifyEach: verifyEach,
				PrintAfter: printAfter,
				DumpDir:    dumpDir,
				Log:        c.ErrOrStderr(),
			})
			if err != nil {
				return err
			}
			// Every file, the .so files included, is made in a staging
			// directory and moved into outDir as one set.
			st, err := driver.Stage(outDir)
			if err != nil {
				return fmt.Errorf("attnc build: %w", err)
			}
			defer st.Abort()
			for _, file := range out.Names() {
				if err := st.Write(file, out.Files[file]); err != nil {
					return fmt.Errorf("attnc build: %w", err)
				}
			}
			var written []string
			for _, file := range out.Names() {
				written = append(written, filepath.Join(outDir, file))
			}
			if shared {
				for _, file := range out.Names() {
					name, ok := strings.CutSuffix(file, ".ll")
					if !ok {
						continue
					}
					if err := tc.BuildShared(st.Path(file), st.Path(name+".so")); err != nil {
						return fmt.Errorf("attnc build --shared: %w", err)
					}
					st.Add(name + ".so")
					written = append(written, filepath.Join(outDir, name+".so"))
				}
			}
			if err := st.Commit(c.OutOrStdout()); err != nil {
				return fmt.Errorf("attnc build: %w", err)
			}
			if depfile != "" {
				if err := os.WriteFile(depfile, []byte(makeDeps(written, args)), 0o644); err != nil {
					return fmt.Errorf("attnc build --depfile: %w", err)
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&targetList, "target", []string{targets.Default}, "comma list of targets to generate (known: "+knownTargets()+")")
	f.StringVar(&triple, "triple", "", "target triple of the "+tripleTarget()+" target's .ll (known: "+strings.Join(tripleNames(), ", ")+"; default "+tripleNames()[0]+")")
	f.StringSliceVar(&cpuLevels, "cpu-levels", nil, cpuLevelsUsage)
	f.StringVarP(&outDir, "out", "o", "", "output directory (created if missing)")
	f.BoolVar(&shared, "shared", false, "also link DIR/<variant>.so from each .ll (needs LLVM 14 opt/llc and gcc)")
	f.BoolVar(&verifyEach, "verify-each", false, "run the kernel-IR verifier after every pass")
	f.StringVar(&printAfter, "print-after", "", "print the kernel IR to stderr after every pass (all) or after the named pass")
	f.StringVar(&dumpDir, "dump-dir", "", "write the kernel IR after lowering and after every pass into this directory")
	f.StringVar(&depfile, "depfile", "", "write make-format dependencies (every output on every spec) to this file")
	return c
}

// cpuLevelsFlag is the --cpu-levels list of command cmd: nil (every
// level) when the flag is not given, else the levels named, checked by the
// target that takes triples for triple; cpu says whether that target is
// among the command's targets, and fix what to do when it is not (the
// error's last words: cpuLevelsFix). An empty list is an error, not every
// level.
func cpuLevelsFlag(c *cobra.Command, cmd string, vals []string, cpu bool, triple, fix string) ([]string, error) {
	if !c.Flags().Changed("cpu-levels") {
		return nil, nil
	}
	tt := tripleTarget()
	if !cpu {
		return nil, fmt.Errorf("%s: --cpu-levels applies to the %s target; %s", cmd, tt, fix)
	}
	levels := append([]string{}, splitList(vals)...)
	if tr, ok := targets.TripleTarget().(targets.Triples); ok {
		if _, err := tr.CheckLevels(triple, levels); err != nil {
			return nil, fmt.Errorf("%s: --cpu-levels: %w", cmd, err)
		}
	}
	return levels, nil
}

// cpuLevelsFix is what to do about --cpu-levels in a command that runs
// one target's kernels (attnc verify, attnc bench) when that target is not
// the one that takes triples: with --gpu (the kernels run on the GPU),
// drop it (and --target when given) or drop --cpu-levels; else name that
// target in --target.
func cpuLevelsFix(c *cobra.Command, gpu bool) string {
	tt := tripleTarget()
	if !gpu {
		return "use --target " + tt + ", or drop --cpu-levels"
	}
	drop := "--gpu"
	if c.Flags().Changed("target") {
		drop = "--gpu and --target"
	}
	return fmt.Sprintf("--gpu runs the GPU kernels, which have no CPU levels: drop %s to run the %s kernels, or drop --cpu-levels", drop, tt)
}

// cpuLevelsUsage is the --cpu-levels flag's description.
const cpuLevelsUsage = "comma list of the CPU levels of the triple to clone the kernels for, or host (this machine's best; default: every level)"

// makeDeps is a make-format dependency file: every output depends on every
// input, and each input has an empty rule (gcc's -MP), so that make does
// not fail when a spec is deleted.
func makeDeps(outputs, inputs []string) string {
	var b strings.Builder
	for i, o := range outputs {
		if i > 0 {
			b.WriteString(" \\\n ")
		}
		b.WriteString(makeEscape(o))
	}
	b.WriteString(":")
	for _, in := range inputs {
		b.WriteString(" \\\n  " + makeEscape(in))
	}
	b.WriteString("\n")
	for _, in := range inputs {
		b.WriteString("\n" + makeEscape(in) + ":\n")
	}
	return b.String()
}

// makeEscape escapes a path for a make rule as gcc -MD does: spaces and
// '#' with a backslash, '$' doubled.
func makeEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case ' ', '\t', '#':
			b.WriteByte('\\')
		case '$':
			b.WriteByte('$')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// knownTargets lists the registered targets with the files they write.
func knownTargets() string {
	var out []string
	for _, t := range targets.All() {
		out = append(out, t.Name()+" writes "+t.Files())
	}
	return strings.Join(out, ", ")
}

// tripleNames are the triples --triple accepts, the default first.
func tripleNames() []string {
	if tr, ok := targets.TripleTarget().(targets.Triples); ok {
		return tr.Triples()
	}
	return []string{""}
}

// parseTargets validates a --target list against the registered targets,
// dropping duplicates and keeping the order given.
func parseTargets(vals []string) ([]string, error) {
	var ts []string
	known := strings.Join(targets.Names(), ", ")
	for _, t := range splitList(vals) {
		if !slices.Contains(targets.Names(), t) {
			return nil, fmt.Errorf("attnc build: unknown target %q (known: %s)", t, known)
		}
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("attnc build: --target is empty (known: %s)", known)
	}
	return ts, nil
}

// checkPassName rejects a --print-after value that names no pass of the
// selected targets' tables (user passes included) before any work is done.
func checkPassName(name string, targets []string, cfg *config) error {
	if name == "" || name == "all" {
		return nil
	}
	tables, err := attnc.PassTables(cfg.insert)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range targets {
		for _, p := range tables[t] {
			if p.Name == name {
				return nil
			}
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	return fmt.Errorf("attnc build: --print-after: no pass named %q in the %s tables (use all or one of: %s)",
		name, strings.Join(targets, ", "), strings.Join(names, ", "))
}
