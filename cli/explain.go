package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/attnc/attnc"
	"github.com/attnc/attnc/driver"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/lower"
	"github.com/attnc/attnc/registry"
	"github.com/attnc/attnc/targets"
	"github.com/spf13/cobra"
)

// shapeFlags are explain's call-shape flags.
type shapeFlags struct {
	batch, qLen, kvLen, threads []int
	sms                         int
}

func (s *shapeFlags) given(c *cobra.Command) bool {
	for _, n := range []string{"batch", "q-len", "kv-len", "threads", "sms"} {
		if c.Flags().Changed(n) {
			return true
		}
	}
	return false
}

func newExplainCmd(cfg *config) *cobra.Command {
	var sf shapeFlags
	var tgt string
	c := &cobra.Command{
		Use:   "explain SPEC... [--target T] [--batch N] [--q-len L] [--kv-len L] [--threads T] [--sms S]",
		Short: "Show each variant's kernels, arguments, constraints and dispatch rules",
		Long: `Compile every variant in memory for one target (--target, default cpu)
and print what 'attnc build' would record in manifest.json, in readable
form: the fixed shape constraints, every kernel with its symbol and
argument order (the entry point per role is marked), and each entry's
plan: its checks, when prefill hands over to decode, the work kernels and
their item counts, how decode splits the KV range (the split rule and its
scratch), and on cuda each launch's grid, block size and dynamic shared
memory.

Given a call shape, explain also prints which kernel serves that call and
how the work is split, computed by the same rule the generated code
compiles in:

  --batch N      number of sequences, 0..2147483647 (default: the length of
                 the longest --q-len/--kv-len list)
  --q-len L      query tokens per sequence, 0..2^30 (default 1, i.e. decode)
  --kv-len L     cached tokens per sequence, the new ones included, 0..2^30
                 (required with any shape flag)
  --threads T    worker threads, 1..1024 (default: this machine's CPUs; cpu)
  --sms S        the GPU's multiprocessors (default 132, an H100/H200;
                 cuda: the launcher splits for 2 x S workers)

For a window variant, the dispatch rules include "reclaim" (which pages of
a sequence no query can see again, as a function of kv_len), and each
--kv-len value gets the pages an engine may reuse once the step's queries
are answered (see docs/spec.md, "Sliding windows: reclaiming pages").

Each flag takes an int or a comma list. --q-len and --kv-len give one value
for every sequence or one per sequence; --batch and --threads lists print
one decision per combination.`,
		Example: `  attnc explain examples/llama3_8b.attn
  attnc explain examples/llama3_8b.attn --batch 1,64 --kv-len 4096 --threads 1,16
  attnc explain examples/llama3_8b.attn --q-len 5,17 --kv-len 100,300
  attnc explain examples/llama3_8b.attn --target cuda --batch 1,64 --kv-len 4096`,
		Args: specArgs,
		RunE: func(c *cobra.Command, args []string) error {
			vs, err := driver.ParseSpecs(args)
			if err != nil {
				return err
			}
			withShape := sf.given(c)
			var shapes []registry.Shape
			if withShape {
				if shapes, err = sf.shapes(); err != nil {
					return err
				}
			}
			out := c.OutOrStdout()
			failed := false
			for i, v := range vs {
				if i > 0 {
					fmt.Fprintln(out)
				}
				if err := explainVariant(out, v, tgt, shapes, cfg); err != nil {
					fmt.Fprintln(c.ErrOrStderr(), errorText(c, err))
					failed = true
				}
			}
			if failed {
				return errReported
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&tgt, "target", targets.Default, "the target whose kernels and launches to explain")
	f.IntVar(&sf.sms, "sms", 0, "GPU multiprocessors for --target cuda (default 132)")
	f.IntSliceVar(&sf.batch, "batch", nil, "number of sequences (int or comma list)")
	f.IntSliceVar(&sf.qLen, "q-len", nil, "query tokens per sequence (int or comma list; default 1)")
	f.IntSliceVar(&sf.kvLen, "kv-len", nil, "cached tokens per sequence (int or comma list)")
	f.IntSliceVar(&sf.threads, "threads", nil, "worker threads (int or comma list; default: number of CPUs)")
	return c
}

// shapes expands the flags into one registry.Shape per (batch, threads).
func (s *shapeFlags) shapes() ([]registry.Shape, error) {
	if len(s.kvLen) == 0 {
		return nil, fmt.Errorf("attnc explain: --kv-len is required to select a kernel for a call shape")
	}
	qLen := s.qLen
	if len(qLen) == 0 {
		qLen = []int{1}
	}
	batches := s.batch
	if len(batches) == 0 {
		batches = []int{max(len(qLen), len(s.kvLen))}
	}
	threads := s.threads
	if len(threads) == 0 {
		threads = []int{defaultWorkers("threads")}
	}
	const cmd = "attnc explain"
	if err := checkBatch(cmd, batches, 0); err != nil {
		return nil, err
	}
	if err := checkSeqLen(cmd, "--q-len", qLen, 0); err != nil {
		return nil, err
	}
	if err := checkSeqLen(cmd, "--kv-len", s.kvLen, 0); err != nil {
		return nil, err
	}
	if err := checkThreads(cmd, threads); err != nil {
		return nil, err
	}
	sms := s.sms
	if sms == 0 {
		sms = defaultWorkers("sms")
	}
	if err := checkSMs(cmd, []int{sms}); err != nil {
		return nil, err
	}
	var out []registry.Shape
	for _, b := range batches {
		var sh registry.Shape
		if len(qLen) == 1 && len(s.kvLen) == 1 {
			// One length for every sequence: nothing is listed per sequence,
			// so any batch_size is cheap to explain.
			if b > 0 {
				sh = registry.Shape{QLens: qLen, KVLens: s.kvLen, Batch: b}
			}
		} else {
			ql, err := perSequence("--q-len", qLen, b)
			if err != nil {
				return nil, err
			}
			kl, err := perSequence("--kv-len", s.kvLen, b)
			if err != nil {
				return nil, err
			}
			sh = registry.Shape{QLens: ql, KVLens: kl}
		}
		total := int64(0)
		single := true
		for _, q := range sh.QLens {
			total += int64(q)
			single = single && q == 1
		}
		if sh.Batch > 0 {
			total *= int64(sh.Batch)
		}
		if total > int64(attnc.BatchBound.Hi) {
			return nil, fmt.Errorf("%s: the batch has %d query tokens; qo_indptr is int32_t and holds at most %d", cmd, total, attnc.BatchBound.Hi)
		}
		sh.DecodeLayout = single
		sh.SMs = sms
		for _, t := range threads {
			sh.Threads = t
			out = append(out, sh)
		}
	}
	return out, nil
}

// perSequence broadcasts a one-value list to n sequences, or checks that
// the list has n values.
func perSequence(flag string, xs []int, n int) ([]int, error) {
	if len(xs) == 1 {
		out := make([]int, n)
		for i := range out {
			out[i] = xs[0]
		}
		return out, nil
	}
	if len(xs) != n {
		return nil, fmt.Errorf("attnc explain: %s has %d values but the batch has %d sequences (give one value or one per sequence)", flag, len(xs), n)
	}
	return xs, nil
}

// explainVariant prints v's manifest entry for target tgt and, for each
// shape, what Select chooses, both from the modules after every pass (user
// passes included).
func explainVariant(w io.Writer, v *ir.Variant, tgt string, shapes []registry.Shape, cfg *config) error {
	if err := lower.Unsupported(v); err != nil {
		return err
	}
	out, err := attnc.CompileVariants([]*ir.Variant{v}, attnc.Options{Targets: []string{tgt}, Insert: cfg.insert})
	if err != nil {
		return err
	}
	var vm *registry.VariantManifest
	for i := range out.Manifest.Variants {
		if out.Manifest.Variants[i].Name == v.Name {
			vm = &out.Manifest.Variants[i]
		}
	}
	if vm == nil {
		return fmt.Errorf("%s: attnc explain: the manifest has no entry for variant %s", v.Pos, v.Name)
	}
	fmt.Fprint(w, registry.Explain(*vm, out.Manifest.Kernels))
	if len(shapes) == 0 {
		return nil
	}
	if !v.HasRole(ir.RolePrefill) && !v.HasRole(ir.RoleDecode) {
		fmt.Fprintf(w, "selection: variant %s has no prefill or decode kernel\n", v.Name)
		return nil
	}
	// Select every shape first: an error prints no partial selection.
	var lines []string
	for _, s := range shapes {
		sel, err := out.Select(v.Name, tgt, s)
		if err != nil {
			return err // "attnc: select <variant> (<target>): ..."
		}
		how := sel.String()
		if sel.TooLarge {
			how = fmt.Sprintf("%s via %s: status %d TOO_LARGE, more than %d work items (nothing is computed; split the batch)", sel.Role, sel.Symbol, ir.StatusTooLarge, lower.MaxItems)
		}
		who := ""
		if w, ok := workersOf(tgt); ok {
			who = fmt.Sprintf("%s=%d", w.Flag, w.Get(s))
		}
		batch := len(s.QLens)
		if s.Batch > 0 {
			batch = s.Batch
		}
		lines = append(lines, fmt.Sprintf("  batch=%d q_len=%s kv_len=%s %s -> %s\n",
			batch, compactInts(s.QLens), compactInts(s.KVLens), who, how))
	}
	fmt.Fprintln(w, "selection:")
	for _, l := range lines {
		fmt.Fprint(w, l)
	}
	return explainReclaim(w, v, shapes)
}

// explainReclaim prints, for each --kv-len given, the pages of a sequence
// that a window variant can never read again once a step's queries are
// answered (registry.ReclaimableRange with from = kv_len).
func explainReclaim(w io.Writer, v *ir.Variant, shapes []registry.Shape) error {
	if registry.ReclaimRuleOf(v) == nil {
		return nil
	}
	fmt.Fprintln(w, "reclaim (after the step, no query below kv_len comes):")
	done := map[int]bool{}
	for _, s := range shapes {
		for _, kvLen := range s.KVLens {
			if done[kvLen] {
				continue
			}
			done[kvLen] = true
			lo, hi, err := registry.ReclaimableRange(v, kvLen)
			if err != nil {
				return err // "attnc: select <variant> (<target>): ..."
			}
			pages := (kvLen + v.PageSize - 1) / v.PageSize
			if hi <= lo {
				fmt.Fprintf(w, "  kv_len=%d -> none of its %d pages\n", kvLen, pages)
				continue
			}
			fmt.Fprintf(w, "  kv_len=%d -> pages %d..%d of its %d (%d pages) may be reused, named or as -1\n", kvLen, lo, hi-1, pages, hi-lo)
		}
	}
	return nil
}

// compactInts prints a list as one value when all are equal, else comma separated.
func compactInts(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	same := true
	for _, x := range xs {
		same = same && x == xs[0]
	}
	if same {
		return fmt.Sprint(xs[0])
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}
