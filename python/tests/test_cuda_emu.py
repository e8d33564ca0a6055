"""The CUDA target from Python: attnc.compile(spec, target="cuda-emu") builds
the generated .cu with g++ against attnc's CUDA emulator, and the Variant
methods and a FlashInfer wrapper planned with a CUDA variant run the CUDA
launchers (stream argument included) against the float64 reference. The
same plumbing with target="cuda" runs on a GPU when torch sees one and nvcc
is installed (skipped otherwise). Shapes are small: the emulator runs every
CUDA thread as a fiber."""

import math
import os
import shutil
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ref  # noqa: E402

import attnc  # noqa: E402
from attnc import _build  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

QO, KV, D, PS = 4, 2, 32, 8

# A Llama-shaped variant scaled down: GQA, causal, HND pages.
SPEC = """
variant emu_llama {
  heads qo = 4, kv = 2
  head_dim 32
  dtype %s
  cache paged(page_size = 8, layout = HND)
  mask causal
  kernels prefill, decode, merge_state, append, copy_page
}
"""

# What FlashInfer's prefill wrapper plans for (NHD, causal, base-2 lse), as a
# spec compiled for the CUDA target and handed to plan(..., variant=v).
FI_SPEC = """
variant emu_fi {
  heads qo = 4, kv = 2
  head_dim 32
  dtype f32
  cache paged(page_size = 8, layout = NHD)
  mask causal
  lse base = 2
  kernels prefill, decode
}
"""

# The ragged-KV and MLA wrappers' kernels for the CUDA target.
FI_MORE_SPEC = """
variant emu_ragged {
  heads qo = 4, kv = 2
  head_dim 32
  dtype f32
  mask causal
  lse base = 2
  kernels prefill_ragged
}
variant emu_mla {
  mla(heads = 4, kv_lora_rank = 32, rope_dim = 16)
  dtype f32
  cache paged(page_size = 8)
  mask causal
  scale 0.2
  lse base = 2
  kernels prefill, decode
}
"""


def need_cxx(tc):
    """need_cxx skips tc without g++, and fails it in CI, where the emulator
    must run."""
    if _build.find_cxx() is None:
        if os.environ.get("CI"):
            tc.fail("CI needs g++ for the CUDA emulator build (apt-get install g++)")
        tc.skipTest("g++ not found: the CUDA emulator build needs it")


def want_attention(q, k, v, qo_indptr, indptr, indices, kv_lens, layout, lse_base=0):
    """want_attention is the causal float64 reference of every sequence."""
    os_, ls = [], []
    for b in range(len(kv_lens)):
        ids = indices[indptr[b]:indptr[b + 1]]
        kb = ref.gather(ref.stored(k, "f32"), ids, kv_lens[b], PS, layout)
        vb = ref.gather(ref.stored(v, "f32"), ids, kv_lens[b], PS, layout)
        qb = ref.stored(q[qo_indptr[b]:qo_indptr[b + 1]], "f32")
        qpos = kv_lens[b] - len(qb) + np.arange(len(qb))
        vis = np.arange(kv_lens[b])[None, :] <= qpos[:, None]
        o, l = ref.attend(qb, kb, vb, vis, 1 / math.sqrt(D), lse_base=lse_base)
        os_.append(o)
        ls.append(l)
    return np.concatenate(os_), np.concatenate(ls)


class EmulatedVariantTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.mod = None
        if _build.find_cxx() is not None:
            cls.mod = attnc.compile(SPEC % "f32", target="cuda-emu")

    def setUp(self):
        need_cxx(self)
        self.v = self.mod["emu_llama"]
        self.rng = np.random.default_rng(7)

    def cache(self, pages):
        return (ref.make(self.rng, (pages, KV, PS, D), "f32"), ref.make(self.rng, (pages, KV, PS, D), "f32"))

    def test_module_is_the_emulated_cuda_build(self):
        self.assertEqual(self.mod.target, "cuda-emu")
        self.assertEqual(self.v.target, "cuda-emu")
        self.assertTrue(self.v.path.endswith(".emu.so"), self.v.path)
        self.assertEqual(self.v.kernels["decode"].symbol, "emu_llama_decode_launch")
        self.assertEqual(self.v.kernels["decode"].arg_names[-1], "stream")
        self.assertEqual(sorted(self.v.kernels), ["append", "copy_page", "decode", "merge_state", "prefill"])
        # The target is part of the cache key: the CPU build of the same spec
        # is another folder.
        self.assertNotEqual(self.mod.path, attnc.compile(SPEC % "f32").path)
        # Cached: the same folder, no rebuild.
        self.assertIs(attnc.compile(SPEC % "f32", target="cuda-emu"), self.mod)

    def test_prefill_and_decode(self):
        k, v = self.cache(10)
        kv_lens = [13, 1, 20]
        indptr, indices, last = ref.page_table(self.rng, kv_lens, PS, 10)
        qo_indptr = np.array([0, 5, 6, 14], np.int32)
        q = ref.make(self.rng, (14, QO, D), "f32")
        o, lse = self.v.prefill(q=q, qo_indptr=qo_indptr, k_pages=k, v_pages=v, kv_indptr=indptr,
                                kv_indices=indices, kv_last_page_len=last, return_lse=True)
        wo, wl = want_attention(q, k, v, qo_indptr, indptr, indices, kv_lens, "HND")
        ref.check_close(self, o, wo, "f32")
        ref.check_lse(self, lse, wl)
        # decode: one query per sequence, at its last position.
        q1 = ref.make(self.rng, (3, QO, D), "f32")
        o1 = self.v.decode(q=q1, k_pages=k, v_pages=v, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
        wo1, _ = want_attention(q1, k, v, np.arange(4, dtype=np.int32), indptr, indices, kv_lens, "HND")
        ref.check_close(self, o1, wo1, "f32")

    @unittest.skipIf(torch is None, "torch not installed")
    def test_decode_torch_outputs_in_kind(self):
        k, v = self.cache(6)
        kv_lens = [9, 16]
        indptr, indices, last = ref.page_table(self.rng, kv_lens, PS, 6)
        q = ref.make(self.rng, (2, QO, D), "f32")
        o = self.v.decode(q=torch.from_numpy(q), k_pages=torch.from_numpy(k), v_pages=torch.from_numpy(v),
                          kv_indptr=torch.from_numpy(indptr), kv_indices=torch.from_numpy(indices),
                          kv_last_page_len=torch.from_numpy(last), stream=0)
        self.assertIsInstance(o, torch.Tensor)
        wo, _ = want_attention(q, k, v, np.arange(3, dtype=np.int32), indptr, indices, kv_lens, "HND")
        ref.check_close(self, o.numpy(), wo, "f32")

    def test_append_copy_page_merge_state_and_errors(self):
        k, v = self.cache(4)
        k0, v0 = k.copy(), v.copy()
        nk = ref.make(self.rng, (3, KV, D), "f32")
        nv = ref.make(self.rng, (3, KV, D), "f32")
        slots = np.array([1 * PS + 2, -1, 3 * PS + 7], np.int32)
        self.v.append(k=nk, v=nv, position_map=slots, k_pages=k, v_pages=v)
        wk, wv = k0.copy(), v0.copy()
        for i, s in enumerate(slots):
            if s >= 0:
                wk[s // PS, :, s % PS], wv[s // PS, :, s % PS] = nk[i], nv[i]
        self.assertTrue(np.array_equal(k, wk) and np.array_equal(v, wv))
        self.v.copy_page(k_pages=k, v_pages=v, src_page=1, dst_page=2, length=5)
        wk[2, :, :5], wv[2, :, :5] = wk[1, :, :5], wv[1, :, :5]
        self.assertTrue(np.array_equal(k, wk) and np.array_equal(v, wv))
        va, vb = (ref.make(self.rng, (5, QO, D), "f32") for _ in range(2))
        sa, sb = (ref.make(self.rng, (5, QO), "f32") for _ in range(2))
        m = np.maximum(sa.astype(np.float64), sb)
        wa, wb = np.exp(sa - m), np.exp(sb - m)
        want_v = (va * wa[..., None] + vb * wb[..., None]) / (wa + wb)[..., None]
        want_s = m + np.log(wa + wb)
        self.v.merge_state(v=va, s=sa, v_other=vb, s_other=sb)
        ref.check_close(self, va, want_v, "f32")
        ref.check_lse(self, sa, want_s)
        # The launcher's own checks come back as attnc.Error, its text from
        # the manifest (the CUDA build has no strerror symbol).
        with self.assertRaises(attnc.Error) as cm:
            self.v.copy_page(k_pages=k, v_pages=v, src_page=4, dst_page=0, length=1)
        self.assertEqual((cm.exception.code, cm.exception.name), (-5, "bad_page_id"))
        self.assertIn("page id", str(cm.exception))
        with self.assertRaisesRegex(ValueError, r"^q: .*float32"):
            self.v.decode(q=np.zeros((1, QO, D), np.float16), k_pages=k, v_pages=v, kv_indptr=np.array([0, 1], np.int32),
                          kv_indices=np.array([0], np.int32), kv_last_page_len=np.array([1], np.int32))

    @unittest.skipIf(torch is None or not hasattr(torch, "cuda"), "torch not installed")
    def test_cuda_tensor_refused_by_emulator(self):
        # Host memory only: a tensor on another device is named, not read.
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device to make a CUDA tensor on")
        q = torch.zeros((1, QO, D), device="cuda")
        with self.assertRaisesRegex(ValueError, "host memory"):
            self.v.decode(q=q, k_pages=np.zeros((1, KV, PS, D), np.float32), v_pages=np.zeros((1, KV, PS, D), np.float32),
                          kv_indptr=np.array([0, 1], np.int32), kv_indices=np.array([0], np.int32),
                          kv_last_page_len=np.array([1], np.int32))


class EmulatedF16Test(unittest.TestCase):
    def test_decode_f16(self):
        # f16 takes the tensor-core (mma) paths of the CUDA kernels; the
        # result is held to ref.py's f16 rule, as the CPU kernels are.
        need_cxx(self)
        v = attnc.compile(SPEC % "f16", target="cuda-emu")["emu_llama"]
        rng = np.random.default_rng(3)
        k = ref.make(rng, (6, KV, PS, D), "f16")
        vv = ref.make(rng, (6, KV, PS, D), "f16")
        kv_lens = [11, 24]
        indptr, indices, last = ref.page_table(rng, kv_lens, PS, 6)
        q = ref.make(rng, (2, QO, D), "f16")
        o = v.decode(q=q, k_pages=k, v_pages=vv, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
        self.assertEqual(o.dtype, np.float16)
        wo, _ = want_attention(q, k, vv, np.arange(3, dtype=np.int32), indptr, indices, kv_lens, "HND")
        ref.check_close(self, o, wo, "f16")


class EmulatedFlashInferTest(unittest.TestCase):
    def test_prefill_wrapper_with_cuda_variant(self):
        need_cxx(self)
        var = attnc.compile(FI_SPEC, target="cuda-emu")["emu_fi"]
        rng = np.random.default_rng(11)
        k = ref.make(rng, (9, PS, KV, D), "f32")
        v = ref.make(rng, (9, PS, KV, D), "f32")
        kv_lens = [10, 0, 17]  # an empty request: o = 0, lse = -inf
        indptr, indices, last = ref.page_table(rng, kv_lens, PS, 9)
        qo_indptr = np.array([0, 4, 6, 9], np.int32)
        q = ref.make(rng, (9, QO, D), "f32")
        w = attnc.BatchPrefillWithPagedKVCacheWrapper(np.zeros(16, np.uint8), kv_layout="NHD")
        w.plan(qo_indptr, indptr, indices, last, QO, KV, D, PS, causal=True, q_data_type="float32", variant=var)
        o, lse = w.run(q, (k, v), return_lse=True)
        keep = np.r_[0:4, 6:9]
        kept_indptr = np.array([0, 4, 4, 7], np.int32)
        wo, wl = want_attention(q[keep], k, v, kept_indptr, indptr, indices, kv_lens, "NHD", lse_base=2)
        ref.check_close(self, o[keep], wo, "f32")
        ref.check_lse(self, lse[keep], wl)
        self.assertTrue(np.all(o[4:6] == 0) and np.all(lse[4:6] == -np.inf))

    @ref.long('the ragged and MLA wrappers on the emulator; the prefill wrapper runs there by default')
    def test_ragged_and_mla_wrappers_with_cuda_variants(self):
        need_cxx(self)
        mod = attnc.compile(FI_MORE_SPEC, target="cuda-emu")
        rng = np.random.default_rng(12)
        # Ragged: request 1 has no keys, request 2 more queries than keys.
        q_lens, kv_lens = [4, 2, 5], [9, 0, 3]
        qo = np.array([0, 4, 6, 11], np.int32)
        kvp = np.array([0, 9, 9, 12], np.int32)
        q = ref.make(rng, (11, QO, D), "f32")
        k = ref.make(rng, (12, KV, D), "f32")
        v = ref.make(rng, (12, KV, D), "f32")
        w = attnc.BatchPrefillWithRaggedKVCacheWrapper(np.zeros(16, np.uint8))
        w.plan(qo, kvp, QO, KV, D, causal=True, q_data_type="float32", variant=mod["emu_ragged"])
        o, lse = w.run(q, k, v, return_lse=True)
        for b in range(3):
            nq, nk = q_lens[b], kv_lens[b]
            vis = np.arange(nk)[None, :] <= (nk - nq + np.arange(nq))[:, None]
            wo, wl = ref.attend(q[qo[b]:qo[b + 1]].astype(np.float64), k[kvp[b]:kvp[b + 1]].astype(np.float64),
                                v[kvp[b]:kvp[b + 1]].astype(np.float64), vis, 1 / math.sqrt(D))
            ref.check_close(self, o[qo[b]:qo[b + 1]], wo, "f32", what="ragged request %d o" % b)
            ref.check_lse(self, lse[qo[b]:qo[b + 1]], wl, what="ragged request %d lse" % b)
        # MLA decode over pages of 8 latent rows.
        r, dr, mps = 32, 16, 8
        ckv = ref.make(rng, (5, mps, r), "f32")
        kpe = ref.make(rng, (5, mps, dr), "f32")
        mla_lens = [13, 1]
        kv_indptr, kv_indices = np.array([0, 2, 3], np.int32), np.array([4, 0, 2], np.int32)
        qn = ref.make(rng, (2, QO, r), "f32")
        qp = ref.make(rng, (2, QO, dr), "f32")
        m = attnc.BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
        m.plan(np.array([0, 1, 2], np.int32), kv_indptr, kv_indices, np.array(mla_lens, np.int32), QO, r, dr, mps,
               True, 0.2, "float32", "float32", variant=mod["emu_mla"])
        o, lse = m.run(qn, qp, ckv, kpe, return_lse=True)
        for b in range(2):
            ids = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]
            c = ckv[ids].reshape(-1, r)[:mla_lens[b]].astype(np.float64)
            e = kpe[ids].reshape(-1, dr)[:mla_lens[b]].astype(np.float64)
            kk = np.concatenate([c, e], axis=1)[:, None, :]
            qq = np.concatenate([qn[b:b + 1], qp[b:b + 1]], axis=2).astype(np.float64)
            wo, wl = ref.attend(qq, kk, c[:, None, :], np.ones((1, mla_lens[b]), bool), 0.2)
            ref.check_close(self, o[b:b + 1], wo, "f32", what="mla request %d o" % b)
            ref.check_lse(self, lse[b:b + 1], wl, what="mla request %d lse" % b)


def _gpu_reason():
    if torch is None:
        return "torch not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is false)"
    if _build.find_nvcc() is None:
        return "nvcc not found"
    return None


@unittest.skipIf(_gpu_reason() is not None, "GPU test: %s" % _gpu_reason())
class GPUTest(unittest.TestCase):
    def test_decode_prefill_and_wrapper_on_the_gpu(self):
        mod = attnc.compile(SPEC % "f32", target="cuda")
        self.assertEqual(mod.target, "cuda")
        v = mod["emu_llama"]
        rng = np.random.default_rng(5)
        dev = torch.device("cuda")
        k = ref.make(rng, (10, KV, PS, D), "f32")
        vv = ref.make(rng, (10, KV, PS, D), "f32")
        kv_lens = [13, 1, 20]
        indptr, indices, last = ref.page_table(rng, kv_lens, PS, 10)
        qo_indptr = np.array([0, 5, 6, 14], np.int32)
        q = ref.make(rng, (14, QO, D), "f32")
        t = lambda a: torch.from_numpy(a).to(dev)  # noqa: E731
        with self.assertRaisesRegex(ValueError, "CUDA tensors"):
            v.prefill(q=q, qo_indptr=qo_indptr, k_pages=k, v_pages=vv, kv_indptr=indptr, kv_indices=indices,
                      kv_last_page_len=last)
        o, lse = v.prefill(q=t(q), qo_indptr=t(qo_indptr), k_pages=t(k), v_pages=t(vv), kv_indptr=t(indptr),
                           kv_indices=t(indices), kv_last_page_len=t(last), return_lse=True)
        self.assertEqual(o.device.type, "cuda")
        torch.cuda.synchronize()
        wo, wl = want_attention(q, k, vv, qo_indptr, indptr, indices, kv_lens, "HND")
        ref.check_close(self, o.cpu().numpy(), wo, "f32")
        ref.check_lse(self, lse.cpu().numpy(), wl)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            o1 = v.decode(q=t(q[:3]), k_pages=t(k), v_pages=t(vv), kv_indptr=t(indptr), kv_indices=t(indices),
                          kv_last_page_len=t(last))
        s.synchronize()
        wo1, _ = want_attention(q[:3], k, vv, np.arange(4, dtype=np.int32), indptr, indices, kv_lens, "HND")
        ref.check_close(self, o1.cpu().numpy(), wo1, "f32")
        # FlashInfer's wrapper with a CUDA workspace plans for the GPU.
        kn = ref.make(rng, (9, PS, KV, D), "f32")
        vn = ref.make(rng, (9, PS, KV, D), "f32")
        w = attnc.BatchDecodeWithPagedKVCacheWrapper(torch.empty(1 << 20, dtype=torch.uint8, device=dev), "NHD")
        w.plan(indptr, indices, last, QO, KV, D, PS, q_data_type=torch.float32)
        got = w.run(t(q[:3]), (t(kn), t(vn)))
        torch.cuda.synchronize()
        wo2, _ = want_attention(q[:3], kn, vn, np.arange(4, dtype=np.int32), indptr, indices, kv_lens, "NHD")
        ref.check_close(self, got.cpu().numpy(), wo2, "f32")


class TargetTest(unittest.TestCase):
    def test_unknown_target_and_missing_nvcc(self):
        with self.assertRaisesRegex(ValueError, "target"):
            attnc.compile(SPEC % "f32", target="rocm")
        if _build.find_nvcc() is None:
            with self.assertRaisesRegex(attnc.CompileError, "nvcc.*cuda-emu"):
                attnc.compile(SPEC % "f32", target="cuda")


if __name__ == "__main__":
    unittest.main()
