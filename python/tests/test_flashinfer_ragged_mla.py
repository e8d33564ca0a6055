"""FlashInfer's ragged-KV prefill wrapper and MLA paged wrapper over attnc,
against a float64 reference written here (each request's softmax(Q·Kᵀ·scale)·V
through ref.attend; MLA as attention of [q_nope, q_pe] over [ckv, kpe] with
values ckv): ragged requests of different lengths, an empty request
(o = 0, lse = -inf), causal rows before the keys (FlashInfer's bottom-right
alignment), causal and non-causal, GQA, head_dim_vo != head_dim_qk, HND k/v,
f32, f16 and bf16 (ref.check_close's rule), base-2 lse, numpy and torch, and
the refusals."""

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

QO, KV = 4, 2
NP_DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
TORCH_DT = {"f16": "float16", "f32": "float32", "bf16": "bfloat16"}


def to_torch(x, dtype):
    x = np.ascontiguousarray(x)
    if dtype == "bf16":  # numpy has no bf16: carry the bit patterns
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def to_numpy(t, dtype):
    return t.view(torch.int16).numpy().view(np.uint16) if dtype == "bf16" else t.numpy()


def indptr(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def ragged_reference(q, k, v, dtype, q_lens, kv_lens, scale, causal, window=-1, softcap=0.0, mask_bits=None,
                     rope=None):
    """ragged_reference is FlashInfer's ragged prefill in float64: request b's
    query i sits at kv_len - q_len + i and sees keys j <= that (causal)."""
    qf, kf, vf = ref.stored(q, dtype), ref.stored(k, dtype), ref.stored(v, dtype)
    qo, kvp = indptr(q_lens), indptr(kv_lens)
    os_, ls = [], []
    moff = 0
    for b in range(len(q_lens)):
        nq, nk = q_lens[b], kv_lens[b]
        qb, kb, vb = qf[qo[b]:qo[b + 1]], kf[kvp[b]:kvp[b + 1]], vf[kvp[b]:kvp[b + 1]]
        qpos = nk - nq + np.arange(nq)
        kpos = np.arange(nk)
        if rope is not None:
            qb, kb = ref.rope(qb, qpos, *rope), ref.rope(kb, kpos, *rope)
        if mask_bits is not None:
            vis = mask_bits[moff:moff + nq * nk].reshape(nq, nk).astype(bool)
            moff += nq * nk
        else:
            vis = np.ones((nq, nk), bool)
            if causal:
                vis &= kpos[None, :] <= qpos[:, None]
        if window >= 0:
            vis &= qpos[:, None] - kpos[None, :] <= window
        o, lse = ref.attend(qb, kb, vb, vis, scale, softcap)
        os_.append(o)
        ls.append(lse)
    return np.concatenate(os_), np.concatenate(ls)


class RaggedTest(unittest.TestCase):
    def run_ragged(self, dtype, q_lens, kv_lens, causal, dqk=16, dvo=None, layout="NHD", as_torch=False, window=-1,
                   softcap=None, sm_scale=None, custom=False, packed=False, rope=None, pass_out=False):
        dvo = dvo or dqk
        rng = np.random.default_rng(sum(q_lens) * 13 + sum(kv_lens) + dqk)
        nq, nk = sum(q_lens), sum(kv_lens)
        q = ref.make(rng, (nq, QO, dqk), dtype)
        k = ref.make(rng, (nk, KV, dqk), dtype)
        v = ref.make(rng, (nk, KV, dvo), dtype)
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
                kw["custom_mask"] = bits
        if rope is not None:
            kw.update(pos_encoding_mode="ROPE_LLAMA", rope_theta=rope[0], rope_scale=rope[1])
        w = attnc.BatchPrefillWithRaggedKVCacheWrapper(np.zeros(16, np.uint8), kv_layout=layout)
        qo, kvp = indptr(q_lens), indptr(kv_lens)
        args = (qo, kvp)
        if as_torch:
            args = tuple(torch.from_numpy(a) for a in args)
        w.plan(*args, QO, KV, dqk, head_dim_vo=None if dvo == dqk else dvo, causal=causal, window_left=window,
               logits_soft_cap=softcap, sm_scale=sm_scale, q_data_type=NP_DT[dtype], **kw)
        kk, vv = k, v
        if layout == "HND":
            kk, vv = np.ascontiguousarray(k.transpose(1, 0, 2)), np.ascontiguousarray(v.transpose(1, 0, 2))
        qq = q
        if as_torch:
            qq, kk, vv = to_torch(q, dtype), to_torch(kk, dtype), to_torch(vv, dtype)
        run_kw = {}
        if pass_out:
            if as_torch:
                run_kw["out"] = to_torch(np.full((nq, QO, dvo), 7, ref.make(rng, (1,), dtype).dtype), dtype)
                run_kw["lse"] = torch.full((nq, QO), 7.0)
            else:
                run_kw["out"] = np.full((nq, QO, dvo), 7, ref.make(rng, (1,), dtype).dtype)
                run_kw["lse"] = np.full((nq, QO), 7.0, np.float32)
        o, lse = w.run(qq, kk, vv, return_lse=True, **run_kw)
        if pass_out:
            self.assertIs(o, run_kw["out"])
            self.assertIs(lse, run_kw["lse"])
        if as_torch:
            self.assertIsInstance(o, torch.Tensor)
            o, lse = to_numpy(o, dtype), lse.numpy()
        scale = sm_scale if sm_scale is not None else 1 / math.sqrt(dqk)
        want_o, want_lse = ragged_reference(q, k, v, dtype, q_lens, kv_lens, scale, causal, window=window,
                                            softcap=softcap or 0.0, mask_bits=bits, rope=rope)
        ref.check_close(self, o, want_o, dtype, vmax=np.abs(ref.stored(v, dtype)).max())
        ref.check_lse(self, lse, want_lse)
        return o, lse, want_lse

    def test_f32_causal_gqa_empty_request_and_rows_before_the_keys(self):
        # Request 1 has no keys (o = 0, lse = -inf), request 2 more queries
        # than keys (its first 3 rows see nothing), request 3 no queries.
        q_lens, kv_lens = [3, 4, 5, 0, 6], [7, 0, 2, 5, 6]
        o, lse, _ = self.run_ragged("f32", q_lens, kv_lens, causal=True)
        self.assertTrue((o[3:7] == 0).all() and np.isneginf(lse[3:7]).all())
        self.assertTrue((o[7:10] == 0).all() and np.isneginf(lse[7:10]).all())
        self.assertTrue(np.isfinite(lse[10:12]).all())

    def test_f32_noncausal_empty_request_passed_out_lse(self):
        o, lse, _ = self.run_ragged("f32", [3, 4, 5], [7, 0, 2], causal=False, pass_out=True)
        self.assertTrue((o[3:7] == 0).all() and np.isneginf(lse[3:7]).all())

    def test_lse_is_base_2(self):
        # One key with score s per row: lse = s / ln 2, o = that key's v.
        k = np.zeros((1, KV, 16), np.float32)
        v = np.arange(KV * 16, dtype=np.float32).reshape(1, KV, 16)
        q = np.zeros((1, QO, 16), np.float32)
        k[0, :, 0] = 2.0
        q[0, :, 0] = 1.5
        w = attnc.BatchPrefillWithRaggedKVCacheWrapper(None)
        w.plan(np.array([0, 1], np.int32), np.array([0, 1], np.int32), QO, KV, 16, causal=True, q_data_type="float32")
        o, lse = w.run(q, k, v, return_lse=True)
        np.testing.assert_allclose(lse, np.full((1, QO), 0.75 / math.log(2)), rtol=1e-6)  # 1.5 * 2 / sqrt(16)
        np.testing.assert_array_equal(o[0], v[0, [0, 0, 1, 1]])

    @unittest.skipIf(torch is None, "torch not installed")
    def test_f16_causal_hnd_torch(self):
        self.run_ragged("f16", [5, 1, 9, 2], [5, 8, 12, 0], causal=True, layout="HND", as_torch=True)

    @unittest.skipIf(torch is None, "torch not installed")
    def test_bf16_noncausal_head_dim_vo_softcap_scale_torch_out(self):
        # DeepSeek's prefill shape in small: head_dim_qk 24, head_dim_vo 16.
        self.run_ragged("bf16", [6, 2, 9], [4, 11, 9], causal=False, dqk=24, dvo=16, softcap=15.0, sm_scale=0.3,
                        as_torch=True, pass_out=True)

    def test_bf16_causal_numpy(self):
        self.run_ragged("bf16", [7, 3, 1], [7, 10, 4], causal=True)

    def test_f32_causal_window_left(self):
        self.run_ragged("f32", [6, 4], [9, 15], causal=True, window=3)

    def test_f32_packed_custom_mask_and_empty_request(self):
        o, lse, _ = self.run_ragged("f32", [3, 5, 2], [7, 5, 0], causal=True, custom=True, packed=True)
        self.assertTrue((o[8:] == 0).all() and np.isneginf(lse[8:]).all())

    def test_f32_rope_llama(self):
        self.run_ragged("f32", [4, 6], [9, 6], causal=True, rope=(10000.0, 1.0))

    def test_variant_argument(self):
        w = attnc.BatchPrefillWithRaggedKVCacheWrapper(None)
        w.plan(np.array([0, 2], np.int32), np.array([0, 3], np.int32), QO, KV, 16, causal=True, q_data_type="float32")
        v = w._plan["variant"]
        w2 = attnc.BatchPrefillWithRaggedKVCacheWrapper(None, "HND")
        w2.plan(np.array([0, 2], np.int32), np.array([0, 3], np.int32), QO, KV, 16, causal=True, q_data_type="float32",
                variant=v)
        self.assertIs(w2._plan["variant"], v)
        with self.assertRaisesRegex(ValueError, "qo_heads"):
            w2.plan(np.array([0, 2], np.int32), np.array([0, 3], np.int32), 2 * QO, KV, 16, causal=True,
                    q_data_type="float32", variant=v)
        with self.assertRaisesRegex(ValueError, r"has mask causal \(causal\), but the plan asks for no mask$"):
            w2.plan(np.array([0, 2], np.int32), np.array([0, 3], np.int32), QO, KV, 16, causal=False,
                    q_data_type="float32", variant=v)

    def test_refusals_and_validation(self):
        z2 = np.array([0, 2], np.int32)
        with self.assertRaisesRegex(NotImplementedError, "use_cuda_graph"):
            attnc.BatchPrefillWithRaggedKVCacheWrapper(None, use_cuda_graph=True)
        with self.assertRaisesRegex(NotImplementedError, "backend"):
            attnc.BatchPrefillWithRaggedKVCacheWrapper(None, backend="cutlass")
        with self.assertRaisesRegex(NotImplementedError, "jit_args"):
            attnc.BatchPrefillWithRaggedKVCacheWrapper(None, jit_args=["x"])
        with self.assertRaisesRegex(KeyError, "kv_layout"):
            attnc.BatchPrefillWithRaggedKVCacheWrapper(None, "NDH")
        w = attnc.BatchPrefillWithRaggedKVCacheWrapper(None)
        with self.assertRaisesRegex(NotImplementedError, "ALIBI"):
            w.plan(z2, z2, QO, KV, 16, pos_encoding_mode="ALIBI")
        with self.assertRaisesRegex(NotImplementedError, "prefix_len_ptr"):
            w.plan(z2, z2, QO, KV, 16, prefix_len_ptr=z2)
        with self.assertRaisesRegex(NotImplementedError, "kv_data_type"):
            w.plan(z2, z2, QO, KV, 16, q_data_type="float16", kv_data_type="bfloat16")
        with self.assertRaisesRegex(NotImplementedError, "kv_data_type"):
            w.plan(z2, z2, QO, KV, 16, q_data_type="float16", kv_data_type="float8_e4m3fn")
        with self.assertRaisesRegex(NotImplementedError, "qo_len 3 > kv_len 2 with a custom mask"):
            w.plan(np.array([0, 3], np.int32), z2, QO, KV, 16, q_data_type="float32",
                   custom_mask=np.ones(6, bool))
        with self.assertRaisesRegex(ValueError, "kv_indptr"):
            w.plan(z2, np.array([0, 2, 4], np.int32), QO, KV, 16, q_data_type="float32")
        with self.assertRaisesRegex(ValueError, "kv_indptr"):
            w.plan(z2, np.array([2, 1], np.int32), QO, KV, 16, q_data_type="float32")
        with self.assertRaises(RuntimeError):
            attnc.BatchPrefillWithRaggedKVCacheWrapper(None).run(np.zeros((2, QO, 16), np.float32),
                                                                 np.zeros((2, KV, 16), np.float32),
                                                                 np.zeros((2, KV, 16), np.float32))
        w.plan(z2, z2, QO, KV, 16, causal=True, q_data_type="float32")
        q = np.zeros((2, QO, 16), np.float32)
        k = np.zeros((2, KV, 16), np.float32)
        with self.assertRaisesRegex(ValueError, "^k: expected"):
            w.run(q, k[:1], k)
        with self.assertRaisesRegex(ValueError, "^v: planned for float32"):
            w.run(q, k, k.astype(np.float16))
        with self.assertRaisesRegex(ValueError, "^q: planned for float32"):
            w.run(q.astype(np.float16), k, k)
        with self.assertRaisesRegex(ValueError, "^out: expected"):
            w.run(q, k, k, out=np.zeros((2, QO, 8), np.float32))
        with self.assertRaisesRegex(NotImplementedError, "positional"):
            w.run(q, k, k, 1.0)

    def test_flashinfer_module_names(self):
        self.assertIs(attnc.prefill.BatchPrefillWithRaggedKVCacheWrapper, attnc.BatchPrefillWithRaggedKVCacheWrapper)
        self.assertIs(attnc.mla.BatchMLAPagedAttentionWrapper, attnc.BatchMLAPagedAttentionWrapper)


H, R, DR, MPS = 4, 32, 16, 4  # MLA heads, kv_lora_rank, rope dim, page size


def mla_reference(q_nope, q_pe, ckv, kpe, dtype, qo, kv_indptr, kv_indices, kv_lens, scale, causal):
    """mla_reference is absorbed MLA in float64: scores scale·(q_nope·ckv +
    q_pe·kpe) over each request's first kv_len cached rows, values ckv."""
    qf = np.concatenate([ref.stored(q_nope, dtype), ref.stored(q_pe, dtype)], axis=-1)
    kf = np.concatenate([ref.stored(ckv, dtype), ref.stored(kpe, dtype)], axis=-1)[:, :, None, :]
    vf = ref.stored(ckv, dtype)[:, :, None, :]
    os_, ls = [], []
    for b in range(len(kv_lens)):
        n = kv_lens[b]
        ids = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]
        kb = ref.gather(kf, ids, n, MPS, "NHD")
        vb = ref.gather(vf, ids, n, MPS, "NHD")
        qb = qf[qo[b]:qo[b + 1]]
        nq = len(qb)
        vis = np.ones((nq, n), bool)
        if causal:
            vis &= np.arange(n)[None, :] <= (n - nq + np.arange(nq))[:, None]
        o, lse = ref.attend(qb, kb, vb, vis, scale)
        os_.append(o)
        ls.append(lse)
    return np.concatenate(os_), np.concatenate(ls)


class MLATest(unittest.TestCase):
    def run_mla(self, dtype, q_lens, kv_lens, causal, extra_pages=(), as_torch=False, fused=False, scale=0.2,
                base_e=False):
        rng = np.random.default_rng(sum(q_lens) * 5 + sum(kv_lens))
        pages = 24
        if fused:  # one [pages, page_size, ckv + kpe] buffer, split by views
            buf = ref.make(rng, (pages, MPS, R + DR), dtype)
            ckv, kpe = buf[:, :, :R], buf[:, :, R:]
        else:
            ckv = ref.make(rng, (pages, MPS, R), dtype)
            kpe = ref.make(rng, (pages, MPS, DR), dtype)
        need = [(n + MPS - 1) // MPS for n in kv_lens]
        # FlashInfer's table may name more pages than kv_len covers.
        have = [a + (1 if b in extra_pages else 0) for b, a in enumerate(need)]
        ids = rng.permutation(pages)[:sum(have)].astype(np.int32)
        kvp = indptr(have)
        qo = indptr(q_lens)
        nq = qo[-1]
        q_nope = ref.make(rng, (nq, H, R), dtype)
        q_pe = ref.make(rng, (nq, H, DR), dtype)
        w = attnc.BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
        lens = np.array(kv_lens, np.int32)
        args = (qo, kvp, ids, lens)
        if as_torch:
            args = tuple(torch.from_numpy(a) for a in args)
        qdt = getattr(torch, TORCH_DT[dtype]) if as_torch else NP_DT[dtype]
        w.plan(*args, H, R, DR, MPS, causal, scale, qdt, qdt)
        ins = (q_nope, q_pe, ckv, kpe)
        if as_torch:
            ins = tuple(to_torch(x, dtype) if not fused or i < 2 else None for i, x in enumerate(ins))
            if fused:
                tb = to_torch(buf, dtype)
                ins = ins[:2] + (tb[:, :, :R], tb[:, :, R:])
        o, lse = w.run(*ins, return_lse=True, return_lse_base_on_e=base_e)
        if as_torch:
            self.assertIsInstance(o, torch.Tensor)
            o, lse = to_numpy(o, dtype), lse.numpy()
        self.assertEqual(o.shape, (nq, H, R))
        want_o, want_lse = mla_reference(q_nope, q_pe, ckv, kpe, dtype, qo, kvp, ids, kv_lens, scale, causal)
        if base_e:
            want_lse = want_lse * math.log(2)
        ref.check_close(self, o, want_o, dtype, vmax=np.abs(ref.stored(ckv, dtype)).max())
        ref.check_lse(self, lse, want_lse)
        return o, lse

    def test_f32_decode_noncausal_empty_request_extra_pages(self):
        o, lse = self.run_mla("f32", [1, 1, 1, 1], [5, 0, 9, 1], causal=False, extra_pages=(0, 3))
        self.assertTrue((o[1] == 0).all() and np.isneginf(lse[1]).all())

    def test_f32_causal_prefill_rows_before_the_cache(self):
        o, lse = self.run_mla("f32", [3, 1, 4, 2], [7, 1, 2, 0], causal=True)
        self.assertTrue((o[4:6] == 0).all() and np.isneginf(lse[4:6]).all())
        self.assertTrue((o[8:] == 0).all() and np.isneginf(lse[8:]).all())

    @unittest.skipIf(torch is None, "torch not installed")
    def test_bf16_causal_torch_fused_buffer(self):
        self.run_mla("bf16", [3, 1, 5], [9, 13, 5], causal=True, as_torch=True, fused=True)

    @ref.long('f16 MLA; f32 and bf16 MLA run by default')
    def test_f16_noncausal_numpy_lse_base_e(self):
        self.run_mla("f16", [2, 1, 3], [6, 17, 3], causal=False, base_e=True)

    def test_refusals_and_validation(self):
        with self.assertRaisesRegex(NotImplementedError, "use_cuda_graph"):
            attnc.BatchMLAPagedAttentionWrapper(None, use_cuda_graph=True)
        with self.assertRaisesRegex(NotImplementedError, "cutlass"):
            attnc.BatchMLAPagedAttentionWrapper(None, backend="cutlass")
        w = attnc.BatchMLAPagedAttentionWrapper(None)
        a1, a2 = np.array([0, 1], np.int32), np.array([3], np.int32)
        ind = np.array([0], np.int32)
        with self.assertRaisesRegex(NotImplementedError, "kv_data_type"):
            w.plan(a1, a1, ind, a2, H, R, DR, MPS, True, 0.2, "bfloat16", "float8_e4m3fn")
        with self.assertRaisesRegex(NotImplementedError, "kv_data_type"):
            w.plan(a1, a1, ind, a2, H, R, DR, MPS, True, 0.2, "bfloat16", "float16")
        with self.assertRaisesRegex(NotImplementedError, "use_profiler"):
            w.plan(a1, a1, ind, a2, H, R, DR, MPS, True, 0.2, "float32", "float32", use_profiler=True)
        with self.assertRaisesRegex(ValueError, "kv_len_arr: request 0 has kv_len 5"):
            w.plan(a1, a1, ind, np.array([5], np.int32), H, R, DR, MPS, True, 0.2, "float32", "float32")
        w.plan(a1, a1, ind, a2, H, R, DR, MPS, False, 0.2, "float32", "float32")
        qn, qp = np.zeros((1, H, R), np.float32), np.zeros((1, H, DR), np.float32)
        ckv, kpe = np.zeros((2, MPS, R), np.float32), np.zeros((2, MPS, DR), np.float32)
        with self.assertRaisesRegex(NotImplementedError, "profiler_buffer"):
            w.run(qn, qp, ckv, kpe, profiler_buffer=np.zeros(4))
        with self.assertRaisesRegex(NotImplementedError, "page_table"):
            w.run(qn, qp, ckv, kpe, page_table=np.zeros((1, 1), np.int32))
        with self.assertRaisesRegex(ValueError, "^kpe_cache: expected"):
            w.run(qn, qp, ckv, ckv)
        with self.assertRaisesRegex(ValueError, "^q_pe: expected"):
            w.run(qn, qn, ckv, kpe)
        # A page id past the pool is the kernel's bad_page_id.
        w.plan(a1, a1, np.array([5], np.int32), a2, H, R, DR, MPS, False, 0.2, "float32", "float32")
        with self.assertRaises(attnc.Error) as cm:
            w.run(qn, qp, ckv, kpe)
        self.assertEqual(cm.exception.code, -5)
        # variant=: the plan's own compiled variant is accepted, one with
        # other heads, scale or mask is not.
        v = w._plan["variant"]
        w.plan(a1, a1, ind, a2, H, R, DR, MPS, False, 0.2, "float32", "float32", variant=v)
        with self.assertRaisesRegex(ValueError, "qo_heads"):
            w.plan(a1, a1, ind, a2, 2 * H, R, DR, MPS, False, 0.2, "float32", "float32", variant=v)
        with self.assertRaisesRegex(ValueError, "scale"):
            w.plan(a1, a1, ind, a2, H, R, DR, MPS, False, 0.3, "float32", "float32", variant=v)
        with self.assertRaisesRegex(ValueError, r"has mask none \(no mask\), but the plan asks for causal$"):
            w.plan(a1, a1, ind, a2, H, R, DR, MPS, True, 0.2, "float32", "float32", variant=v)
        # Its lse is in base 2: run(return_lse_base_on_e=True) disagrees.
        w.plan(a1, a1, ind, a2, H, R, DR, MPS, False, 0.2, "float32", "float32", variant=v)
        with self.assertRaisesRegex(ValueError, r"writes lse in base 2 \(lse base = 2\), but the plan returns it in base e$"):
            w.run(qn, qp, ckv, kpe, return_lse=True, return_lse_base_on_e=True)


if __name__ == "__main__":
    unittest.main()
