"""attnc.compile / attnc.load and the Variant methods against the float64
reference: sizes derived from the arrays, outputs allocated or passed,
validation naming the argument, attnc.Error with the kernel's status, the
compile cache (first use against a cached load in a fresh process), DSL
features beyond FlashInfer (tree mask, 8-bit cache with learned sinks) and
the per-call cost of the Python layer against a direct ctypes call."""

import ctypes
import math
import os
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ref  # noqa: E402

import attnc  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

QO, KV, D, PS = 4, 2, 16, 4

SPEC = """
variant core_f32 {
  heads qo = 4, kv = 2
  head_dim 16
  dtype f32
  cache paged(page_size = 4, layout = HND)
  mask causal
  kernels prefill, decode, merge_state, append, copy_page
}
variant core_tree {
  heads qo = 4, kv = 2
  head_dim 16
  dtype f32
  cache paged(page_size = 4, layout = HND)
  mask tree
  kernels prefill
}
variant core_e4m3 {
  heads qo = 4, kv = 2
  head_dim 16
  dtype f32
  cache paged(page_size = 4, layout = HND, kv_dtype = e4m3, kv_scale = per_head)
  mask causal
  sinks learned
  kernels decode
}
"""


def e4m3_value(code):
    """e4m3_value is the OCP FP8 E4M3 value of each code (no NaN codes here)."""
    c = np.asarray(code, np.int64)
    s = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = c & 7
    return s * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


def module():
    return attnc.compile(SPEC)


class CompileTest(unittest.TestCase):
    def test_first_use_then_cached_load(self):
        # A spec no other test builds, in a fresh cache: the first compile
        # runs attnc; a new process then finds it in the cache.
        spec = SPEC.replace("core_f32", "fresh_f32").split("variant core_tree")[0].replace(
            "kernels prefill, decode, merge_state, append, copy_page", "kernels prefill, decode")
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            m = attnc.compile(spec, cache_dir=d)
            first = time.perf_counter() - t0
            self.assertIn("fresh_f32", m)
            prog = ("import time, attnc; t = time.perf_counter(); m = attnc.compile(%r, cache_dir=%r); "
                    "print(time.perf_counter() - t, m.path)" % (spec, d))
            env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(attnc.__file__)))
            out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, check=True)
            cached, path = out.stdout.split()
            self.assertEqual(os.path.realpath(path), os.path.realpath(m.path))
            self.assertEqual(len(os.listdir(os.path.join(d, "kernels"))), 1, "the second process built nothing")
            print("\ncompile: first use %.2f s, cached load in a fresh process %.1f ms"
                  % (first, float(cached) * 1e3), file=sys.stderr)
        # load() reads what attnc build --shared wrote.
        again = attnc.load(module().path)
        self.assertEqual(sorted(again.variants), ["core_e4m3", "core_f32", "core_tree"])

    def test_spec_path_and_errors(self):
        with tempfile.NamedTemporaryFile("w", suffix=".attn", delete=False) as f:
            f.write(SPEC)
        try:
            self.assertEqual(attnc.compile(f.name).path, module().path)
        finally:
            os.unlink(f.name)
        with self.assertRaisesRegex(attnc.CompileError, r"spec.attn:\d+:\d+: .*head"):
            attnc.compile("variant bad {\n  heads qo = 3, kv = 2\n  head_dim 16\n  dtype f32\n  cache paged(page_size = 4)\n}\n")
        with self.assertRaisesRegex(ValueError, "target"):
            attnc.compile(SPEC, target="rocm")


class VariantTest(unittest.TestCase):
    def setUp(self):
        self.v = module()["core_f32"]
        self.rng = np.random.default_rng(1)

    def cache(self, pages):
        k = ref.make(self.rng, (pages, KV, PS, D), "f32")
        v = ref.make(self.rng, (pages, KV, PS, D), "f32")
        return k, v

    def want(self, q, k, v, qo_indptr, indptr, indices, kv_lens, lse_base=math.e):
        os_, ls = [], []
        for b in range(len(kv_lens)):
            ids = indices[indptr[b]:indptr[b + 1]]
            kb = ref.gather(k.astype(np.float64), ids, kv_lens[b], PS, "HND")
            vb = ref.gather(v.astype(np.float64), ids, kv_lens[b], PS, "HND")
            qb = q[qo_indptr[b]:qo_indptr[b + 1]].astype(np.float64)
            qpos = kv_lens[b] - len(qb) + np.arange(len(qb))
            vis = np.arange(kv_lens[b])[None, :] <= qpos[:, None]
            o, l = ref.attend(qb, kb, vb, vis, 1 / math.sqrt(D), lse_base=0)
            os_.append(o)
            ls.append(l)
        return np.concatenate(os_), np.concatenate(ls)

    def test_prefill_sizes_derived_outputs_allocated(self):
        k, v = self.cache(12)
        kv_lens = [5, 9, 13]
        indptr, indices, last = ref.page_table(self.rng, kv_lens, PS, 12)
        qo_indptr = np.array([0, 2, 9, 10], np.int32)
        q = ref.make(self.rng, (10, QO, D), "f32")
        o, lse = self.v.prefill(q=q, qo_indptr=qo_indptr, k_pages=k, v_pages=v, kv_indptr=indptr,
                                kv_indices=indices, kv_last_page_len=last, return_lse=True)
        wo, wl = self.want(q, k, v, qo_indptr, indptr, indices, kv_lens)
        ref.check_close(self, o, wo, "f32")
        ref.check_lse(self, lse, wl)
        # Outputs passed in are written in place; lse without return_lse.
        out = np.zeros_like(q)
        got = self.v.prefill(q=q, qo_indptr=qo_indptr, k_pages=k, v_pages=v, kv_indptr=indptr, kv_indices=indices,
                             kv_last_page_len=last, o=out, num_pages=12, batch_size=3)
        self.assertIs(got, out)
        ref.check_close(self, out, wo, "f32")

    @unittest.skipIf(torch is None, "torch not installed")
    def test_decode_torch(self):
        k, v = self.cache(8)
        kv_lens = [3, 11]
        indptr, indices, last = ref.page_table(self.rng, kv_lens, PS, 8)
        q = ref.make(self.rng, (2, QO, D), "f32")
        t = torch.from_numpy
        o = self.v.decode(q=t(q), k_pages=t(k), v_pages=t(v), kv_indptr=t(indptr), kv_indices=t(indices),
                          kv_last_page_len=t(last))
        self.assertIsInstance(o, torch.Tensor)
        wo, _ = self.want(q, k, v, np.arange(3), indptr, indices, kv_lens)
        ref.check_close(self, o.numpy(), wo, "f32")

    def test_append_copy_page_merge_state(self):
        k, v = self.cache(4)
        nk = ref.make(self.rng, (3, KV, D), "f32")
        nv = ref.make(self.rng, (3, KV, D), "f32")
        pm = np.array([2 * PS + 1, -1, 0], np.int32)
        self.v.append(k=nk, v=nv, position_map=pm, k_pages=k, v_pages=v)
        np.testing.assert_array_equal(k[2, :, 1], nk[0])
        np.testing.assert_array_equal(v[0, :, 0], nv[2])
        self.v.copy_page(k_pages=k, v_pages=v, src_page=2, dst_page=3, length=2)
        np.testing.assert_array_equal(k[3, :, :2], k[2, :, :2])
        va = ref.make(self.rng, (5, QO, D), "f32")
        vb = ref.make(self.rng, (5, QO, D), "f32")
        sa = ref.make(self.rng, (5, QO), "f32")
        sb = ref.make(self.rng, (5, QO), "f32")
        a, b = sa.astype(np.float64), sb.astype(np.float64)
        m = np.maximum(a, b)
        wa, wb = np.exp(a - m), np.exp(b - m)
        want_v = (va * wa[..., None] + vb * wb[..., None]) / (wa + wb)[..., None]
        self.v.merge_state(v=va, s=sa, v_other=vb, s_other=sb)
        ref.check_close(self, va, want_v, "f32")
        ref.check_lse(self, sa, m + np.log(wa + wb))

    def test_validation_names_the_argument(self):
        k, v = self.cache(4)
        q = np.zeros((1, QO, D), np.float32)
        ok = dict(q=q, k_pages=k, v_pages=v, kv_indptr=np.array([0, 1], np.int32), kv_indices=np.array([0], np.int32),
                  kv_last_page_len=np.array([1], np.int32))
        with self.assertRaisesRegex(ValueError, r"^q: expected float32"):
            self.v.decode(**dict(ok, q=q.astype(np.float16)))
        with self.assertRaisesRegex(ValueError, r"^v_pages: dimension 2 must be 4"):
            self.v.decode(**dict(ok, v_pages=v[:, :, :2]))
        with self.assertRaisesRegex(ValueError, r"^kv_last_page_len: dimension 0 gives batch_size = 2"):
            self.v.decode(**dict(ok, kv_last_page_len=np.array([1, 1], np.int32)))
        with self.assertRaisesRegex(ValueError, r"^num_pages: 9 disagrees with k_pages"):
            self.v.decode(num_pages=9, **ok)
        with self.assertRaisesRegex(ValueError, r"^kv_indices: missing"):
            self.v.decode(**{a: b for a, b in ok.items() if a != "kv_indices"})
        with self.assertRaisesRegex(ValueError, r"^o: an output must be contiguous"):
            self.v.decode(o=np.zeros((1, QO, 2 * D), np.float32)[:, :, ::2], **ok)
        with self.assertRaisesRegex(TypeError, "block_table"):
            self.v.decode(block_table=q, **ok)
        with self.assertRaises(attnc.Error) as cm:
            self.v.decode(**dict(ok, kv_last_page_len=np.array([7], np.int32)))
        self.assertEqual(cm.exception.code, -4)
        self.assertEqual(cm.exception.name, "bad_last_page_len")
        self.assertIn("kv_last_page_len must be in 1..page_size", str(cm.exception))

    def test_set_num_threads(self):
        attnc.set_num_threads(1)
        try:
            self.assertEqual(self.v.get_num_threads(), 1)
            self.test_prefill_sizes_derived_outputs_allocated()
        finally:
            attnc.set_num_threads(0)
        self.assertEqual(self.v.get_num_threads(), os.cpu_count())

    def test_call_overhead(self):
        # The Python layer's cost per call against the same kernel called
        # through ctypes with prepared pointers (a one-position decode).
        k, v = self.cache(1)
        args = dict(q=np.zeros((1, QO, D), np.float32), k_pages=k, v_pages=v, kv_indptr=np.array([0, 1], np.int32),
                    kv_indices=np.array([0], np.int32), kv_last_page_len=np.array([1], np.int32),
                    o=np.zeros((1, QO, D), np.float32))
        kern = self.v.kernels["decode"]
        ptr = {n: a.ctypes.data for n, a in args.items()}
        ptr.update(num_pages=1, batch_size=1, lse=None)
        raw = [ptr[a.name] for a in kern.args]
        fn = kern._fn
        n = 2000

        def best(f):
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    f()
                ts.append((time.perf_counter() - t0) / n)
            return min(ts)

        attnc.set_num_threads(1)  # the call itself, not the thread pool's hand-off
        try:
            direct = best(lambda: fn(*raw))
            wrapped = best(lambda: self.v.decode(**args))
        finally:
            attnc.set_num_threads(0)
        print("\ncall overhead: direct ctypes %.1f us, Variant.decode %.1f us: the Python layer adds %.1f us"
              % (direct * 1e6, wrapped * 1e6, (wrapped - direct) * 1e6), file=sys.stderr)
        self.assertLess(wrapped - direct, 1e-3)


class BeyondFlashInferTest(unittest.TestCase):
    def test_tree_mask(self):
        v = module()["core_tree"]
        rng = np.random.default_rng(2)
        k, vv = (ref.make(rng, (6, KV, PS, D), "f32") for _ in range(2))
        # One sequence: 7 cached positions, the last 4 a tree 0 -> {1, 2}, 2 -> 3.
        tree = np.array([[0, 4], [1, 2], [2, 4], [3, 4]], np.int32)
        q = ref.make(rng, (4, QO, D), "f32")
        indptr, indices, last = ref.page_table(rng, [7], PS, 6)
        o = v.prefill(q=q, qo_indptr=np.array([0, 4], np.int32), tree_order=tree,
                      tree_order_indptr=np.array([0, 4], np.int32), k_pages=k, v_pages=vv, kv_indptr=indptr,
                      kv_indices=indices, kv_last_page_len=last)
        kb = ref.gather(k.astype(np.float64), indices, 7, PS, "HND")
        vb = ref.gather(vv.astype(np.float64), indices, 7, PS, "HND")
        vis = np.zeros((4, 7), bool)
        vis[:, :3] = True
        for i in range(4):
            for j in range(4):
                vis[i, 3 + j] = tree[j, 0] <= tree[i, 0] < tree[j, 1]
        wo, _ = ref.attend(q.astype(np.float64), kb, vb, vis, 1 / math.sqrt(D))
        ref.check_close(self, o, wo, "f32")

    def test_e4m3_cache_with_learned_sinks(self):
        v = module()["core_e4m3"]
        rng = np.random.default_rng(3)
        codes = [rng.integers(0, 256, (5, KV, PS, D)).astype(np.uint8) for _ in range(2)]
        for c in codes:
            c &= 0xBF  # |value| < 2: no NaN codes, no cancellation past f32's 1e-5
        ks, vs = np.array([0.5, 0.25], np.float32), np.array([0.125, 2.0], np.float32)
        sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
        q = ref.make(rng, (2, QO, D), "f32")
        indptr, indices, last = ref.page_table(rng, [6, 9], PS, 5)
        o, lse = v.decode(q=q, k_pages=codes[0], v_pages=codes[1], k_scale=ks, v_scale=vs, sinks=sinks,
                          kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last, return_lse=True)
        kf = e4m3_value(codes[0]) * ks[None, :, None, None]
        vf = e4m3_value(codes[1]) * vs[None, :, None, None]
        for b, n in enumerate([6, 9]):
            ids = indices[indptr[b]:indptr[b + 1]]
            kb, vb = ref.gather(kf, ids, n, PS, "HND"), ref.gather(vf, ids, n, PS, "HND")
            for h in range(QO):
                s = q[b, h].astype(np.float64) @ kb[:, h // 2].T / math.sqrt(D)
                m = max(s.max(), sinks[h])
                w = np.exp(s - m)
                den = w.sum() + math.exp(sinks[h] - m)
                ref.check_close(self, o[b, h], w @ vb[:, h // 2] / den, "f32")
                ref.check_lse(self, lse[b, h], m + math.log(den))

    def test_qkv_append_rope_table(self):
        # rope at_append from a table: qkv_append takes rope_cos and
        # rope_sin (rope_positions from their first dimension) and rotates
        # q and K with them, half pairs over the first 8 dims.
        v = attnc.compile("""
variant core_qkv_table {
  heads qo = 4, kv = 2
  head_dim 16
  dtype f32
  cache paged(page_size = 4, layout = HND)
  rope at_append(table, rotary_dim = 8)
  kernels qkv_append, decode
}
""")["core_qkv_table"]
        self.assertEqual(v.qkv_append.arg_names[:5], ["qkv", "positions", "rope_cos", "rope_sin", "rope_positions"])
        rng = np.random.default_rng(4)
        n, rows, half = 5, 40, 4
        qkv = ref.make(rng, (n, QO + 2 * KV, D), "f32")
        amp, ang = 0.5 + rng.random((rows, half)), 2 * math.pi * rng.random((rows, half))
        cos, sin = (amp * np.cos(ang)).astype(np.float32), (amp * np.sin(ang)).astype(np.float32)
        pos = np.array([39, 0, 7, 12, 3], np.int32)
        pm = np.array([5, -1, 0, 9, 14], np.int32)
        k = np.full((4, KV, PS, D), np.nan, np.float32)
        vv = np.full((4, KV, PS, D), np.nan, np.float32)
        _, _, q_out = v.qkv_append(qkv=qkv, positions=pos, rope_cos=cos, rope_sin=sin, position_map=pm,
                                   k_pages=k, v_pages=vv)

        def rotated(x, p):
            x = x.astype(np.float64)
            c, s = cos[p].astype(np.float64), sin[p].astype(np.float64)
            out = x.copy()
            out[..., :half] = x[..., :half] * c - x[..., half:2 * half] * s
            out[..., half:2 * half] = x[..., half:2 * half] * c + x[..., :half] * s
            return out

        for t in range(n):
            ref.check_close(self, q_out[t], rotated(qkv[t, :QO], pos[t]), "f32", what="q_out")
            if pm[t] >= 0:
                pg, off = divmod(int(pm[t]), PS)
                ref.check_close(self, k[pg, :, off], rotated(qkv[t, QO:QO + KV], pos[t]), "f32", what="k")
                np.testing.assert_array_equal(vv[pg, :, off], qkv[t, QO + KV:])
        # A position outside the table: BAD_ARGUMENT, nothing written.
        before = k.copy()
        with self.assertRaises(attnc.Error) as e:
            v.qkv_append(qkv=qkv, positions=np.array([0, 1, 40, 2, 3], np.int32), rope_cos=cos, rope_sin=sin,
                         position_map=pm, k_pages=k, v_pages=vv, q_out=q_out)
        self.assertEqual(e.exception.name, "bad_argument")
        np.testing.assert_array_equal(k, before)


if __name__ == "__main__":
    unittest.main()
