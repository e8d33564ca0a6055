"""A small Llama-shaped decoder served end to end through a paged cache:
random weights, 2 layers, GQA (4 query heads over 2 KV heads), RoPE applied
by the kernels (ROPE_LLAMA), a causal layer and a window_left = 6 layer; 4
sequences of different lengths (one a fork sharing another's prefix pages,
its partial page copied with copy_page), a sequence aborted and its pages
poisoned with NaN and reused, a mixed step (chunked prefill next to
decodes), greedy generation of 32 tokens each through attnc's append,
prefill and decode. The same model with dense float64 attention gives the
reference logits for the same tokens; the greedy tokens and the logits must
agree, in f32 and bf16.

Layer 0 keeps K and V as two arrays written by Variant.append; layer 1
keeps FlashInfer's one [pages, 2, ...] array written by
append_paged_kv_cache. Attention runs through FlashInfer's wrappers planned
with variant= (the compiled spec below)."""

import math
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ref  # noqa: E402

import attnc  # noqa: E402

VOCAB, HID, QO, KV, D, FF = 64, 64, 4, 2, 16, 128
PS, POOL, WINDOW, THETA = 4, 48, 6, 10000.0
GEN = 32

SPEC = """
variant m_full_{dt} {{
  heads qo = 4, kv = 2
  head_dim 16
  dtype {dt}
  cache paged(page_size = 4, layout = NHD)
  mask causal
  rope inline(theta = 10000)
  lse base = 2
  kernels prefill, decode, append, copy_page
}}
variant m_win_{dt} {{
  heads qo = 4, kv = 2
  head_dim 16
  dtype {dt}
  cache paged(page_size = 4, layout = NHD)
  mask window(left = 6)
  rope inline(theta = 10000)
  lse base = 2
  kernels prefill, decode
}}
"""


class Weights:
    def __init__(self, seed):
        rng = np.random.default_rng(seed)

        def w(*shape):
            return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)

        self.emb = rng.standard_normal((VOCAB, HID)).astype(np.float32)
        self.layers = []
        for _ in range(2):
            self.layers.append(dict(
                n1=(1 + 0.1 * rng.standard_normal(HID)).astype(np.float32),
                wq=w(HID, QO * D), wk=w(HID, KV * D), wv=w(HID, KV * D), wo=w(QO * D, HID),
                n2=(1 + 0.1 * rng.standard_normal(HID)).astype(np.float32),
                w1=w(HID, FF), w3=w(HID, FF), w2=w(FF, HID)))
        self.nf = np.ones(HID, np.float32)
        self.lm = w(HID, VOCAB) * 4


def rmsnorm(x, g):
    return (x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)).astype(np.float32) * g


def mlp(h, L):
    a = h @ L["w1"]
    return ((a / (1 + np.exp(-a))) * (h @ L["w3"])) @ L["w2"]


def store(x, dt):
    """store rounds f32 activations to the cache dtype's storage."""
    return ref.bf16_round(x) if dt == "bf16" else x.astype(np.float32)


def load(x, dt):
    return ref.stored(x, dt).astype(np.float32)


def dense_logits(W, tokens, dt):
    """dense_logits runs the model on one sequence with dense float64
    attention (RoPE on the stored q and k); it returns every position's
    logits."""
    n = len(tokens)
    x = W.emb[tokens]
    pos = np.arange(n)
    for li, L in enumerate(W.layers):
        h = rmsnorm(x, L["n1"])
        q = ref.stored(store((h @ L["wq"]).reshape(n, QO, D), dt), dt)
        k = ref.stored(store((h @ L["wk"]).reshape(n, KV, D), dt), dt)
        v = ref.stored(store((h @ L["wv"]).reshape(n, KV, D), dt), dt)
        q, k = ref.rope(q, pos, THETA), ref.rope(k, pos, THETA)
        vis = pos[None, :] <= pos[:, None]
        if li == 1:
            vis &= pos[:, None] - pos[None, :] <= WINDOW
        o, _ = ref.attend(q, k, v, vis, 1 / math.sqrt(D))
        o = load(store(o.astype(np.float32), dt), dt) if dt == "bf16" else o.astype(np.float32)
        x = x + o.reshape(n, QO * D) @ L["wo"]
        x = x + mlp(rmsnorm(x, L["n2"]), L)
    return rmsnorm(x, W.nf) @ W.lm


class Seq:
    def __init__(self, tokens):
        self.tokens = list(tokens)
        self.pages = []
        self.kv_len = 0
        self.generated = []
        self.logits = {}  # position -> logits the paged run computed


class Server:
    """Server is a minimal engine: a page pool per layer, a free list, and
    a step that runs a batch of (sequence, new tokens) through the model."""

    def __init__(self, W, dt):
        self.W, self.dt = W, dt
        mod = attnc.compile(SPEC.format(dt=dt))
        self.vfull, self.vwin = mod["m_full_" + dt], mod["m_win_" + dt]
        npdt = np.uint16 if dt == "bf16" else np.float32
        self.k0 = np.zeros((POOL, PS, KV, D), npdt)
        self.v0 = np.zeros((POOL, PS, KV, D), npdt)
        self.kv1 = np.zeros((POOL, 2, PS, KV, D), npdt)
        self.free = list(range(POOL))
        ws = np.zeros(1 << 16, np.uint8)
        self.prefill = [attnc.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD") for _ in range(2)]
        self.decode = [attnc.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD") for _ in range(2)]

    def alloc(self, seq, new_len):
        while len(seq.pages) * PS < seq.kv_len + new_len:
            seq.pages.append(self.free.pop(0))

    def release(self, seq, poison=True):
        nan = 0x7FC0 if self.dt == "bf16" else np.nan
        for p in seq.pages:
            if poison:  # a freed page may hold anything
                self.k0[p] = nan
                self.v0[p] = nan
                self.kv1[p] = nan
        self.free[:0] = seq.pages  # reused first
        seq.pages = []

    def fork(self, parent):
        """fork shares parent's full pages and copies its partial last page."""
        child = Seq(parent.tokens)
        full = parent.kv_len // PS
        child.pages = parent.pages[:full]
        child.kv_len = parent.kv_len
        if parent.kv_len % PS:
            dst = self.free.pop(0)
            src = parent.pages[full]
            self.vfull.copy_page(k_pages=self.k0, v_pages=self.v0, src_page=src, dst_page=dst,
                                 length=parent.kv_len % PS)
            self.kv1[dst] = self.kv1[src]
            child.pages.append(dst)
        return child

    def step(self, batch):
        """step appends each sequence's new tokens and returns, per sequence,
        the logits of its last new token."""
        dt = self.dt
        for s, new in batch:
            self.alloc(s, len(new))
        toks = np.array([t for _, new in batch for t in new])
        n = len(toks)
        qlens = [len(new) for _, new in batch]
        qo_indptr = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
        positions = np.concatenate([np.arange(s.kv_len, s.kv_len + len(new)) for s, new in batch]).astype(np.int32)
        for s, new in batch:
            s.kv_len += len(new)
            s.tokens += list(new)
        kv_indptr = np.concatenate([[0], np.cumsum([len(s.pages) for s, _ in batch])]).astype(np.int32)
        kv_indices = np.array([p for s, _ in batch for p in s.pages], np.int32)
        last = np.array([s.kv_len - (len(s.pages) - 1) * PS for s, _ in batch], np.int32)
        slot = np.array([s.pages[p // PS] * PS + p % PS
                         for s, new in batch for p in range(s.kv_len - len(new), s.kv_len)], np.int32)
        decode = all(q == 1 for q in qlens)
        qdt = {"f32": "float32", "bf16": "bfloat16"}[dt]
        x = self.W.emb[toks]
        for li, L in enumerate(self.W.layers):
            h = rmsnorm(x, L["n1"])
            q = store((h @ L["wq"]).reshape(n, QO, D), dt)
            k = store((h @ L["wk"]).reshape(n, KV, D), dt)
            v = store((h @ L["wv"]).reshape(n, KV, D), dt)
            common = dict(pos_encoding_mode="ROPE_LLAMA", rope_theta=THETA, q_data_type=qdt,
                          window_left=-1 if li == 0 else WINDOW, variant=self.vfull if li == 0 else self.vwin)
            if li == 0:
                self.vfull.append(k=k, v=v, position_map=slot, k_pages=self.k0, v_pages=self.v0)
                cache = (self.k0, self.v0)
            else:
                seq_lens = attnc.get_seq_lens(kv_indptr, last, PS)
                bi, pos = attnc.get_batch_indices_positions(qo_indptr, seq_lens, n)
                np.testing.assert_array_equal(pos, positions)
                attnc.append_paged_kv_cache(k, v, bi, pos, self.kv1, kv_indices, kv_indptr, last)
                cache = self.kv1
            if decode:
                w = self.decode[li]
                w.plan(kv_indptr, kv_indices, last, QO, KV, D, PS, **common)
            else:
                w = self.prefill[li]
                w.plan(qo_indptr, kv_indptr, kv_indices, last, QO, KV, D, PS, causal=True, **common)
            o = load(w.run(q, cache), dt)
            x = x + o.reshape(n, QO * D) @ L["wo"]
            x = x + mlp(rmsnorm(x, L["n2"]), L)
        logits = rmsnorm(x, self.W.nf) @ self.W.lm
        out = []
        for (s, new), hi in zip(batch, qo_indptr[1:]):
            s.logits[s.kv_len - 1] = logits[hi - 1]
            out.append(logits[hi - 1])
        return out


def greedy(server, seqs_and_new):
    lg = server.step(seqs_and_new)
    for (s, _), l in zip(seqs_and_new, lg):
        s.generated.append(int(np.argmax(l)))


class ModelTest(unittest.TestCase):
    def serve(self, dt):
        W = Weights(11)
        rng = np.random.default_rng(12)
        srv = Server(W, dt)
        s0, s1, s2 = Seq([]), Seq([]), Seq([])
        aborted = Seq([])
        prompts = [rng.integers(0, VOCAB, n).tolist() for n in (10, 7, 13, 6)]
        active = [s0, s1, s2, aborted]
        greedy(srv, list(zip(active, prompts)))
        for _ in range(4):
            greedy(srv, [(s, [s.generated[-1]]) for s in active])
        # Abort one sequence: its pages are poisoned and go back to the pool.
        active.remove(aborted)
        aborted_pages = set(aborted.pages)
        srv.release(aborted)
        # Fork s0 after 15 tokens (10 + the 5 it generated): s3 shares its
        # full pages, copies the partial one into a reused page and takes a
        # 3-token chunk of its own, next to the others' decode step.
        self.assertEqual(s0.kv_len, 14)
        s0_next = s0.generated[-1]
        greedy(srv, [(s0, [s0_next])])
        s3 = srv.fork(s0)
        copied = set(s3.pages) - set(s0.pages)
        self.assertEqual(len(copied), 1)
        self.assertTrue(copied <= aborted_pages, "the fork's copied page reuses a poisoned page")
        self.assertEqual(s3.pages[:3], s0.pages[:3], "the fork shares the full prefix pages")
        chunk = rng.integers(0, VOCAB, 3).tolist()
        batch = [(s, [s.generated[-1]]) for s in (s1, s2)] + [(s0, [s0.generated[-1]]), (s3, chunk)]
        greedy(srv, batch)
        seqs = [s0, s1, s2, s3]
        while True:
            live = [s for s in seqs if len(s.generated) < GEN]
            if not live:
                break
            greedy(srv, [(s, [s.generated[-1]]) for s in live])
        for s in seqs:
            self.assertGreaterEqual(len(s.generated), GEN)
        return W, seqs

    def check(self, dt, ltol):
        W, seqs = self.serve(dt)
        worst = 0.0
        for si, s in enumerate(seqs):
            want = dense_logits(W, s.tokens[: max(s.logits) + 1], dt)
            for p, got in sorted(s.logits.items()):
                w = want[p]
                err = np.abs(got - w).max()
                worst = max(worst, err)
                self.assertLessEqual(err, ltol, "seq %d position %d: logits differ by %g" % (si, p, err))
                top = np.sort(w)[-2:]
                if top[1] - top[0] > 2 * ltol:  # a clear winner: the same greedy token
                    self.assertEqual(int(np.argmax(got)), int(np.argmax(w)), "seq %d position %d" % (si, p))
        print("\n%s: %d sequences, %s logits rows, largest logit difference %.3g" % (dt, len(seqs), sum(len(s.logits) for s in seqs), worst), file=sys.stderr)

    def test_f32(self):
        self.check("f32", 1e-4)

    def test_bf16(self):
        self.check("bf16", 1e-2)


if __name__ == "__main__":
    unittest.main()
