"""FlashInfer's wrappers over attnc, against the float64 reference in
ref.py: decode and prefill with FlashInfer's plan arguments and semantics
(base-2 lse, window_left with and without causal, soft cap after sm_scale,
ROPE_LLAMA with rope_scale, custom and packed masks, empty requests,
strided q, NHD/HND, tuple and [pages, 2, ...] caches), the refusals, and
merge_state, append_paged_kv_cache and the index helpers."""

import math
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ref  # noqa: E402

import attnc  # noqa: E402

try:
    import torch
except ImportError:  # torch is optional
    torch = None

QO, KV, D, PS = 4, 2, 16, 4
NP_DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def make_cache(rng, num_pages, dtype, layout, fused=False):
    shape = (num_pages, PS, KV, D) if layout == "NHD" else (num_pages, KV, PS, D)
    if fused:
        kv = ref.make(rng, (num_pages, 2) + shape[1:], dtype)
        return kv, kv[:, 0], kv[:, 1]
    k = ref.make(rng, shape, dtype)
    v = ref.make(rng, shape, dtype)
    return (k, v), k, v


def reference(q, k, v, dtype, layout, qo_indptr, indptr, indices, kv_lens, scale, causal=True, window=-1,
              softcap=0.0, rope=None, mask_bits=None):
    """reference is FlashInfer's attention for a planned batch, in float64."""
    qf = ref.stored(q, dtype)
    kf, vf = ref.stored(k, dtype), ref.stored(v, dtype)
    os_, ls = [], []
    moff = 0
    for b in range(len(kv_lens)):
        n = kv_lens[b]
        ids = indices[indptr[b]:indptr[b + 1]]
        kb = ref.gather(kf, ids, n, PS, layout)
        vb = ref.gather(vf, ids, n, PS, layout)
        qb = qf[qo_indptr[b]:qo_indptr[b + 1]]
        nq = len(qb)
        qpos = n - nq + np.arange(nq)
        kpos = np.arange(n)
        if rope is not None:
            qb = ref.rope(qb, qpos, *rope)
            kb = ref.rope(kb, kpos, *rope)
        vis = np.ones((nq, n), bool)
        if mask_bits is not None:
            vis = mask_bits[moff:moff + nq * n].reshape(nq, n).astype(bool)
            moff += nq * n
        elif causal:
            vis &= kpos[None, :] <= qpos[:, None]
        if window >= 0:
            vis &= qpos[:, None] - kpos[None, :] <= window
        o, lse = ref.attend(qb, kb, vb, vis, scale, softcap)
        os_.append(o)
        ls.append(lse)
    return np.concatenate(os_), np.concatenate(ls)


class DecodeTest(unittest.TestCase):
    def run_decode(self, dtype, layout, fused, kv_lens, window=-1, softcap=None, sm_scale=None, strided_q=False,
                   as_torch=False, rope=None, variant=None):
        rng = np.random.default_rng(len(kv_lens) * 7 + window)
        pages = 20
        cache, k, v = make_cache(rng, pages, dtype, layout, fused)
        indptr, indices, last = ref.page_table(rng, kv_lens, PS, pages)
        B = len(kv_lens)
        if strided_q:  # q sliced from a fused QKV projection
            qkv = ref.make(rng, (B, (QO + 2 * KV) * D), dtype)
            q = qkv[:, : QO * D].reshape(B, QO, D)
            self.assertFalse(q.flags.c_contiguous)
        else:
            q = ref.make(rng, (B, QO, D), dtype)
        w = attnc.BatchDecodeWithPagedKVCacheWrapper(np.zeros(1 << 20, np.uint8), layout)
        kw = {}
        if rope is not None:
            kw = dict(pos_encoding_mode="ROPE_LLAMA", rope_theta=rope[0], rope_scale=rope[1])
        if variant is not None:
            kw["variant"] = variant
        w.plan(indptr, indices, last, QO, KV, D, PS, window_left=window, logits_soft_cap=softcap,
               q_data_type=NP_DT[dtype], sm_scale=sm_scale, **kw)
        qq, cc = q, cache
        if as_torch:
            qq = torch.from_numpy(np.ascontiguousarray(q))
            cc = torch.from_numpy(cache) if not isinstance(cache, tuple) else tuple(torch.from_numpy(x) for x in cache)
        o, lse = w.run(qq, cc, return_lse=True)
        if as_torch:
            self.assertIsInstance(o, torch.Tensor)
            o, lse = o.numpy(), lse.numpy()
        scale = sm_scale if sm_scale is not None else 1 / math.sqrt(D)
        want_o, want_lse = reference(q, k, v, dtype, layout, np.arange(B + 1), indptr, indices, kv_lens, scale,
                                     window=window, softcap=softcap or 0.0, rope=rope)
        ref.check_close(self, o, want_o, dtype, vmax=np.abs(ref.stored(v, dtype)).max())
        ref.check_lse(self, lse, want_lse)
        return o, lse

    def test_f32_nhd_tuple(self):
        self.run_decode("f32", "NHD", False, [5, 17, 1, 30])

    def test_f32_fused_cache_strided_q(self):
        self.run_decode("f32", "NHD", True, [9, 3, 12], strided_q=True)

    def test_empty_request_gives_zero_and_minus_inf(self):
        o, lse = self.run_decode("f32", "NHD", False, [6, 0, 11])
        self.assertTrue((o[1] == 0).all())
        self.assertTrue(np.isneginf(lse[1]).all())

    @unittest.skipIf(torch is None, "torch not installed")
    def test_torch_tensors(self):
        self.run_decode("f32", "NHD", True, [4, 13], as_torch=True)

    def test_bf16_hnd_window_softcap_scale(self):
        self.run_decode("bf16", "HND", False, [3, 14, 27], window=5, softcap=20.0, sm_scale=0.3)

    def test_lse_is_base_2(self):
        # One visible position with score s: lse = log2(exp(s)) = s / ln 2.
        rng = np.random.default_rng(3)
        k = np.zeros((2, PS, KV, D), np.float32)
        v = rng.standard_normal((2, PS, KV, D)).astype(np.float32)
        q = np.zeros((1, QO, D), np.float32)
        k[0, 0, :, 0] = 2.0
        q[0, :, 0] = 1.5
        w = attnc.BatchDecodeWithPagedKVCacheWrapper(None)
        w.plan(np.array([0, 1], np.int32), np.array([0], np.int32), np.array([1], np.int32), QO, KV, D, PS,
               q_data_type="float32")
        o, lse = w.run(q, (k, v), return_lse=True)
        np.testing.assert_allclose(lse, np.full((1, QO), 0.75 / math.log(2)), rtol=1e-6)  # 1.5 * 2 / sqrt(16)


class PrefillTest(unittest.TestCase):
    def run_prefill(self, dtype, layout, fused, q_lens, kv_lens, causal=True, window=-1, softcap=None, rope=None,
                    custom=False, packed=False, as_torch=False, variant=None, lse=True, sm_scale=None):
        rng = np.random.default_rng(sum(q_lens) + 3 * sum(kv_lens))
        pages = 24
        cache, k, v = make_cache(rng, pages, dtype, layout, fused)
        indptr, indices, last = ref.page_table(rng, kv_lens, PS, pages)
        qo_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        q = ref.make(rng, (qo_indptr[-1], QO, D), dtype)
        w = attnc.BatchPrefillWithPagedKVCacheWrapper(np.zeros(16, np.uint8), kv_layout=layout)
        kw = {}
        bits = None
        if custom:
            bits = rng.random(sum(a * b for a, b in zip(q_lens, kv_lens))) < 0.6
            if packed:
                segs, off = [], 0
                for a, b in zip(q_lens, kv_lens):
                    segs.append(np.packbits(bits[off:off + a * b], bitorder="little"))
                    off += a * b
                kw["packed_custom_mask"] = np.concatenate(segs)
            else:
                kw["custom_mask"] = torch.from_numpy(bits) if as_torch else bits
        if rope is not None:
            kw.update(pos_encoding_mode="ROPE_LLAMA", rope_theta=rope[0], rope_scale=rope[1])
        if variant is not None:
            kw["variant"] = variant
        args = (qo_indptr, indptr, indices, last)
        if as_torch:
            args = tuple(torch.from_numpy(a) for a in args)
        w.plan(*args, QO, KV, D, PS, causal=causal, window_left=window, logits_soft_cap=softcap,
               q_data_type=NP_DT[dtype], sm_scale=sm_scale, **kw)
        qq, cc = q, cache
        if as_torch:
            qq = torch.from_numpy(q)
            cc = torch.from_numpy(cache) if not isinstance(cache, tuple) else tuple(torch.from_numpy(x) for x in cache)
        got = w.run(qq, cc, return_lse=lse)
        o, l = got if lse else (got, None)
        if as_torch:
            o = o.numpy()
            l = l.numpy() if l is not None else None
        scale = sm_scale if sm_scale is not None else 1 / math.sqrt(D)
        want_o, want_lse = reference(q, k, v, dtype, layout, qo_indptr, indptr, indices, kv_lens, scale,
                                     causal=causal, window=window, softcap=softcap or 0.0, rope=rope, mask_bits=bits)
        ref.check_close(self, o, want_o, dtype, vmax=np.abs(ref.stored(v, dtype)).max())
        if lse:
            ref.check_lse(self, l, want_lse)
        return o, l

    def test_f32_causal_ragged(self):
        self.run_prefill("f32", "NHD", False, [3, 1, 7, 12], [10, 1, 7, 30])

    @unittest.skipIf(torch is None, "torch not installed")
    def test_f32_causal_fused_torch(self):
        self.run_prefill("f32", "NHD", True, [4, 9], [13, 9], as_torch=True)

    def test_q_longer_than_kv_and_empty_request(self):
        # Causal rows before the cache and requests without pages see
        # nothing: o = 0, lse = -inf, as FlashInfer's kernels give.
        o, l = self.run_prefill("f32", "NHD", False, [5, 3, 2], [2, 0, 6])
        self.assertTrue((o[:3] == 0).all() and np.isneginf(l[:3]).all())
        self.assertTrue((o[5:8] == 0).all() and np.isneginf(l[5:8]).all())

    def test_noncausal_window_left_bounds_only_the_left(self):
        self.run_prefill("f32", "NHD", False, [6, 4], [9, 15], causal=False, window=3)

    def test_noncausal_full(self):
        self.run_prefill("f32", "NHD", False, [6, 4], [9, 2], causal=False)

    def test_bf16_hnd_window_softcap(self):
        self.run_prefill("bf16", "HND", False, [3, 14, 27], [3, 14, 30], window=5, softcap=20.0, sm_scale=0.3)

    def test_f16_rope_llama_scaled(self):
        self.run_prefill("f16", "NHD", True, [5, 8], [11, 8], rope=(10000.0, 2.0))

    def test_custom_mask(self):
        self.run_prefill("f32", "NHD", False, [3, 5, 2], [7, 5, 0], custom=True)

    def test_packed_custom_mask(self):
        self.run_prefill("f32", "NHD", False, [3, 5, 2], [7, 5, 0], custom=True, packed=True)

    @ref.long('the variant argument; test_flashinfer_ragged_mla.py passes one to the ragged wrapper by default')
    def test_variant_argument(self):
        # A compiled Variant (HND, natural-log lse) in place of the plan's spec.
        sys.path.insert(0, os.path.dirname(__file__))
        import test_core
        v = test_core.module()["core_f32"]
        self.run_prefill("f32", "HND", False, [3, 7], [8, 7], variant=v, lse=False)
        w = attnc.BatchPrefillWithPagedKVCacheWrapper(None, "HND")
        with self.assertRaisesRegex(ValueError, "page_size"):
            w.plan(np.array([0, 1], np.int32), np.array([0, 1], np.int32), np.array([0], np.int32),
                   np.array([1], np.int32), QO, KV, D, 8, causal=True, q_data_type="float32", variant=v)
        with self.assertRaisesRegex(ValueError, "layout"):
            attnc.BatchPrefillWithPagedKVCacheWrapper(None, "NHD").plan(
                np.array([0, 1], np.int32), np.array([0, 1], np.int32), np.array([0], np.int32),
                np.array([1], np.int32), QO, KV, D, PS, causal=True, q_data_type="float32", variant=v)


class VariantAgreementTest(unittest.TestCase):
    """plan(..., variant=v) refuses a variant that disagrees with the plan
    on a setting that decides the values (mask, window, custom mask, soft
    cap, RoPE, scale, the cache's dtype; at run, the lse base) with a
    ValueError naming both sides. The variants are those other tests'
    plans compile (and test_core's), so the checks compile nothing new."""

    def planned(self, decode=False, layout="NHD", dtype="float32", **kw):
        one, zero = np.array([0, 1], np.int32), np.array([0], np.int32)
        if decode:
            w = attnc.BatchDecodeWithPagedKVCacheWrapper(None, layout)
            w.plan(one, zero, np.array([1], np.int32), QO, KV, D, PS, q_data_type=dtype, **kw)
        else:
            w = attnc.BatchPrefillWithPagedKVCacheWrapper(None, layout)
            w.plan(one, one, zero, np.array([1], np.int32), QO, KV, D, PS, q_data_type=dtype, **kw)
        return w

    def variant_of(self, **kw):
        return self.planned(**kw)._plan["variant"]

    def refuse(self, pattern, variant, **kw):
        with self.assertRaisesRegex(ValueError, pattern):
            self.planned(variant=variant, **kw)

    def test_mask_disagreements(self):
        causal, none = self.variant_of(causal=True), self.variant_of(causal=False)
        ncwin = self.variant_of(causal=False, window_left=3)
        custom = self.variant_of(custom_mask=np.ones(1, bool))
        self.refuse(r"has mask none \(no mask\), but the plan asks for causal$", none, causal=True)
        self.refuse(r"has mask causal \(causal\), but the plan asks for no mask$", causal, causal=False)
        self.refuse(r"has mask causal \(causal\), but the plan asks for causal, window_left = 3$", causal, causal=True,
                    window_left=3)
        self.refuse(r"has mask expr\(\(q_pos - kv_pos\) <= 3\) \(no mask, window_left = 3\), but the plan asks for "
                    r"causal, window_left = 3$", ncwin, causal=True, window_left=3)
        self.refuse(r"has mask causal \(causal\), but the plan asks for custom mask$", causal,
                    custom_mask=np.ones(1, bool))
        self.refuse(r"has mask custom \(custom mask\), but the plan asks for causal$", custom, causal=True)
        # Decode's query sits at the last cached position: causal or not
        # sees the same keys, a window does not.
        self.refuse(r"has mask none \(no mask\), but the plan asks for causal, window_left = 3$", none, decode=True,
                    window_left=3)
        bf16 = dict(dtype="bfloat16", layout="HND", causal=True, logits_soft_cap=20.0, sm_scale=0.3)
        self.refuse(r"has mask window\(left = 5\) \(causal, window_left = 5\), but the plan asks for causal, "
                    r"window_left = 4$", self.variant_of(window_left=5, **bf16), window_left=4, **bf16)
        sys.path.insert(0, os.path.dirname(__file__))
        import test_core
        self.refuse(r"core_tree has mask tree, which a FlashInfer plan cannot say", test_core.module()["core_tree"],
                    layout="HND", causal=True)

    def test_score_rope_scale_and_cache_disagreements(self):
        bf16 = dict(dtype="bfloat16", layout="HND", causal=True, window_left=5, logits_soft_cap=20.0, sm_scale=0.3)
        v = self.variant_of(**bf16)
        self.assertIs(self.planned(variant=v, **bf16)._plan["variant"], v)  # agrees
        self.refuse(r"has score @softcap.f32\(score, 20.0:f32\), but the plan's logits_soft_cap is None$", v,
                    **dict(bf16, logits_soft_cap=None))
        self.refuse(r"has score @softcap.f32\(score, 20.0:f32\), but the plan's logits_soft_cap is 30.0 ", v,
                    **dict(bf16, logits_soft_cap=30.0))
        # FlashInfer's default sm_scale is 1/sqrt(head_dim): a variant with
        # another scale disagrees unless the plan names it.
        self.refuse(r"has scale 0.30000001192092896, but the plan's sm_scale is 0.25 ", v, **dict(bf16, sm_scale=None))
        causal = self.variant_of(causal=True)
        self.refuse(r"has score score, but the plan's logits_soft_cap is 20.0 ", causal, causal=True, logits_soft_cap=20.0)
        rope = dict(dtype="float16", causal=True, pos_encoding_mode="ROPE_LLAMA", rope_theta=10000.0, rope_scale=2.0)
        vr = self.variant_of(**rope)
        self.planned(variant=vr, **rope)  # agrees
        self.refuse(r"rotates q and k inline \(rope inline, theta 10000\), but the plan's pos_encoding_mode is 'NONE'$",
                    vr, **dict(rope, pos_encoding_mode="NONE"))
        self.refuse(r"has rope inline\(theta = 10000, style = llama3, factor = 2, high_freq = 2, low_freq = 1, "
                    r"original_max = 1e-06, pairs = half, rotary_dim = 16\), but the plan asks for ROPE_LLAMA with "
                    r"rope_theta = 10000.0, rope_scale = 1.0 \(rope inline\(theta = 10000.0\)\)$", vr,
                    **dict(rope, rope_scale=1.0))
        self.refuse(r"but the plan asks for ROPE_LLAMA with rope_theta = 500000.0, rope_scale = 2.0 ", vr,
                    **dict(rope, rope_theta=500000.0))
        self.refuse(r"has no inline rope, but the plan asks for ROPE_LLAMA with rope_theta = 10000.0, rope_scale = 1.0 ",
                    causal, causal=True, pos_encoding_mode="ROPE_LLAMA")
        sys.path.insert(0, os.path.dirname(__file__))
        import test_core
        self.refuse(r"core_e4m3 stores K/V as e4m3 codes, but the plan's kv_data_type is float32$",
                    test_core.module()["core_e4m3"], decode=True, layout="HND")

    def test_lse_base(self):
        # A natural-log variant serves o; asking it for FlashInfer's base-2
        # lse is a disagreement.
        sys.path.insert(0, os.path.dirname(__file__))
        import test_core
        w = self.planned(variant=test_core.module()["core_f32"], layout="HND", causal=True)
        q = np.ones((1, QO, D), np.float32)
        cache = (np.ones((1, KV, PS, D), np.float32), np.full((1, KV, PS, D), 2, np.float32))
        np.testing.assert_allclose(w.run(q, cache), np.full((1, QO, D), 2), rtol=1e-6)
        with self.assertRaisesRegex(ValueError, r"core_f32 writes lse in base e \(lse base = e\), but the plan returns "
                                                r"it in base 2$"):
            w.run(q, cache, return_lse=True)

    def test_unsupplied_arguments_refused_at_plan(self):
        # Variants that agree with the plan but whose kernel takes an
        # argument run() cannot supply (learned sinks, a param) are refused
        # by plan() itself, naming the argument, not by their first run.
        spec = """
variant fi_sinks {
  heads qo = %d, kv = %d
  head_dim %d
  dtype f32
  cache paged(page_size = %d, layout = NHD)
  mask causal
  sinks learned
  kernels decode, prefill
}
variant fi_param {
  heads qo = %d, kv = %d
  head_dim %d
  dtype f32
  cache paged(page_size = %d, layout = NHD)
  param slopes f32[qo_heads]
  score score - slopes[head] * (q_pos - kv_pos)
  mask causal
  kernels decode, prefill
}
""" % ((QO, KV, D, PS) * 2)
        mod = attnc.compile(spec)
        for name, words in (("fi_sinks", r"takes sinks \(its learned sinks; run's sinks= is not served\)"),
                            ("fi_param", r"takes slopes \(its param slopes\)")):
            v = mod[name]
            for decode in (True, False):
                role = "decode" if decode else "prefill"
                with self.assertRaisesRegex(NotImplementedError, r"^variant %s's %s kernel %s, which the FlashInfer "
                                            r"wrapper cannot supply; call variant.%s\(\.\.\.\) directly$"
                                            % (name, role, words, role)):
                    self.planned(decode=decode, variant=v, **({} if decode else dict(causal=True)))

    def test_agreeing_variant_runs(self):
        # A non-causal variant serves a decode plan (the query sits at the
        # last cached position, so every key is visible either way).
        DecodeTest().run_decode("f32", "NHD", False, [5, 9, 1], variant=self.variant_of(causal=False))


class RefusalTest(unittest.TestCase):
    def test_gpu_only_options(self):
        ws = np.zeros(16, np.uint8)
        with self.assertRaisesRegex(NotImplementedError, "use_cuda_graph"):
            attnc.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=True)
        with self.assertRaisesRegex(NotImplementedError, "trtllm-gen"):
            attnc.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", backend="trtllm-gen")
        with self.assertRaisesRegex(NotImplementedError, "backend"):
            attnc.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
        w = attnc.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)  # a hint: accepted
        z = np.zeros(2, np.int32)
        with self.assertRaisesRegex(NotImplementedError, "ALIBI"):
            w.plan(z, z[:1], z[:1] + 1, QO, KV, D, PS, pos_encoding_mode="ALIBI")
        with self.assertRaisesRegex(NotImplementedError, "block_tables"):
            w.plan(z, z[:1], z[:1] + 1, QO, KV, D, PS, block_tables=z)

    def test_validation_names_the_argument(self):
        w = attnc.BatchDecodeWithPagedKVCacheWrapper(None)
        with self.assertRaisesRegex(ValueError, "indptr"):
            w.plan(np.array([0, 1, 2], np.int32), np.array([0, 1], np.int32), np.array([1], np.int32),
                   QO, KV, D, PS, q_data_type="float32")
        w.plan(np.array([0, 1], np.int32), np.array([0], np.int32), np.array([1], np.int32), QO, KV, D, PS,
               q_data_type="float32")
        k = np.zeros((2, PS, KV, D), np.float32)
        with self.assertRaisesRegex(ValueError, "^q: planned for float32"):
            w.run(np.zeros((1, QO, D), np.float16), (k, k))
        with self.assertRaisesRegex(ValueError, "paged_kv_cache"):
            w.run(np.zeros((1, QO, D), np.float32), (k, k[:, :, :1]))

    def test_bad_page_id_is_an_error_with_code(self):
        w = attnc.BatchDecodeWithPagedKVCacheWrapper(None)
        w.plan(np.array([0, 1], np.int32), np.array([7], np.int32), np.array([1], np.int32), QO, KV, D, PS,
               q_data_type="float32")
        k = np.zeros((2, PS, KV, D), np.float32)
        with self.assertRaises(attnc.Error) as cm:
            w.run(np.zeros((1, QO, D), np.float32), (k, k))
        self.assertEqual(cm.exception.code, -5)
        self.assertIn("page id", str(cm.exception))
        # The same id through a fused cache (page ids scaled by 2) too.
        kv = np.zeros((2, 2, PS, KV, D), np.float32)
        with self.assertRaises(attnc.Error):
            w.run(np.zeros((1, QO, D), np.float32), kv)


class SingleTest(unittest.TestCase):
    def test_single_prefill_and_decode(self):
        rng = np.random.default_rng(8)
        n = 11
        k = ref.make(rng, (n, KV, D), "f32")
        v = ref.make(rng, (n, KV, D), "f32")
        q = ref.make(rng, (5, QO, D), "f32")
        qpos = n - 5 + np.arange(5)
        vis = np.arange(n)[None, :] <= qpos[:, None]
        want, wl = ref.attend(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), vis, 1 / math.sqrt(D))
        o, lse = attnc.single_prefill_with_kv_cache(q, k, v, causal=True, return_lse=True)
        ref.check_close(self, o, want, "f32")
        ref.check_lse(self, lse, wl)
        # HND k/v, one query: decode.
        kh, vh = k.transpose(1, 0, 2).copy(), v.transpose(1, 0, 2).copy()
        o = attnc.single_decode_with_kv_cache(q[4], kh, vh, kv_layout="HND")
        ref.check_close(self, o, want[4], "f32")

    def test_merge_states(self):
        rng = np.random.default_rng(9)
        v = rng.standard_normal((3, 4, 2, 16)).astype(np.float32)
        s = (rng.standard_normal((3, 4, 2)) * 2).astype(np.float32)
        mv, ms = attnc.merge_states(v, s)
        w = np.exp2(s.astype(np.float64) - s.max(axis=1, keepdims=True))
        ref.check_close(self, mv, (w[..., None] * v).sum(1) / w.sum(1)[..., None], "f32")
        ref.check_lse(self, ms, s.max(axis=1) + np.log2(w.sum(1)))


class HelpersTest(unittest.TestCase):
    def test_merge_state(self):
        rng = np.random.default_rng(5)
        n, h, d = 7, 2, 16
        va, vb = rng.standard_normal((2, n, h, d)).astype(np.float32)
        sa, sb = (rng.standard_normal((2, n, h)) * 3).astype(np.float32)
        sb[2, 1] = -np.inf
        v, s = attnc.merge_state(va, sa, vb, sb)
        a, b = sa.astype(np.float64), sb.astype(np.float64)
        m = np.maximum(a, b)
        wa, wb = np.exp2(a - m), np.exp2(b - m)
        want_v = (va * wa[..., None] + vb * wb[..., None]) / (wa + wb)[..., None]
        want_s = m + np.log2(wa + wb)
        ref.check_close(self, v, want_v, "f32")
        ref.check_lse(self, s, want_s)
        mask = np.array([1, 0, 1, 0, 0, 1, 1], bool)
        v2, s2 = va.copy(), sa.copy()
        attnc.merge_state_in_place(v2, s2, vb, sb, mask=mask)
        ref.check_close(self, v2, np.where(mask[:, None, None], want_v, va), "f32")
        ref.check_lse(self, s2, np.where(mask[:, None], want_s, sa))

    def test_flashinfer_module_names(self):
        # flashinfer.decode.X, flashinfer.page.Y, ... resolve as in FlashInfer.
        self.assertIs(attnc.decode.BatchDecodeWithPagedKVCacheWrapper, attnc.BatchDecodeWithPagedKVCacheWrapper)
        self.assertIs(attnc.prefill.single_prefill_with_kv_cache, attnc.single_prefill_with_kv_cache)
        self.assertIs(attnc.cascade.merge_state_in_place, attnc.merge_state_in_place)
        self.assertIs(attnc.page.get_seq_lens, attnc.get_seq_lens)

    def test_append_and_index_helpers(self):
        rng = np.random.default_rng(6)
        pages = 6
        kv = np.full((pages, 2, PS, KV, D), np.nan, np.float32)
        kv_indptr = np.array([0, 2, 3], np.int32)
        kv_indices = np.array([4, 1, 3], np.int32)
        last = np.array([3, 2], np.int32)
        seq_lens = attnc.get_seq_lens(kv_indptr, last, PS)
        np.testing.assert_array_equal(seq_lens, [7, 2])
        self.assertEqual(seq_lens.dtype, np.int32)
        append_indptr = np.array([0, 7, 9], np.int32)
        bi, pos = attnc.get_batch_indices_positions(append_indptr, seq_lens, 9)
        np.testing.assert_array_equal(bi, [0] * 7 + [1] * 2)
        np.testing.assert_array_equal(pos, list(range(7)) + [0, 1])
        k = rng.standard_normal((9, KV, D)).astype(np.float32)
        v = rng.standard_normal((9, KV, D)).astype(np.float32)
        attnc.append_paged_kv_cache(k, v, bi, pos, kv, kv_indices, kv_indptr, last)
        for i in range(9):
            b, p = bi[i], pos[i]
            page = kv_indices[kv_indptr[b] + p // PS]
            np.testing.assert_array_equal(kv[page, 0, p % PS], k[i])
            np.testing.assert_array_equal(kv[page, 1, p % PS], v[i])
        self.assertTrue(np.isnan(kv[0]).all() and np.isnan(kv[2]).all(), "pages no table names stay untouched")


if __name__ == "__main__":
    unittest.main()
