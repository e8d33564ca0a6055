"""FlashInfer's documented batch decode, batch prefill (paged and ragged)
and MLA examples (the docstrings of BatchDecodeWithPagedKVCacheWrapper,
BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper
and BatchMLAPagedAttentionWrapper), run unchanged after
``import attnc as flashinfer`` with the one adaptation CPU tensors need
(the device: "cuda:0", "cuda" or 0 -> "cpu"), and the outputs compared
with the float64 reference."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ref  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

DECODE_EXAMPLE = '''
import torch
import flashinfer
num_layers = 32
num_qo_heads = 64
num_kv_heads = 8
head_dim = 128
max_num_pages = 128
page_size = 16
# allocate 128MB workspace buffer
workspace_buffer = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
decode_wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
    workspace_buffer, "NHD"
)
batch_size = 7
kv_page_indices = torch.arange(max_num_pages).int().to("cuda:0")
kv_page_indptr = torch.tensor(
    [0, 17, 29, 44, 48, 66, 100, 128], dtype=torch.int32, device="cuda:0"
)
# 1 <= kv_last_page_len <= page_size
kv_last_page_len = torch.tensor(
    [1, 7, 14, 4, 3, 1, 16], dtype=torch.int32, device="cuda:0"
)
kv_cache_at_layer = [
    torch.randn(
        max_num_pages, 2, page_size, num_kv_heads, head_dim, dtype=torch.float16, device="cuda:0"
    ) for _ in range(num_layers)
]
# create auxiliary data structures for batch decode attention
decode_wrapper.plan(
    kv_page_indptr,
    kv_page_indices,
    kv_last_page_len,
    num_qo_heads,
    num_kv_heads,
    head_dim,
    page_size,
    pos_encoding_mode="NONE",
    data_type=torch.float16
)
outputs = []
for i in range(num_layers):
    q = torch.randn(batch_size, num_qo_heads, head_dim).half().to("cuda:0")
    kv_cache = kv_cache_at_layer[i]
    # compute batch decode attention, reuse auxiliary data structures for all layers
    o = decode_wrapper.run(q, kv_cache)
    outputs.append(o)

assert outputs[0].shape == torch.Size([7, 64, 128])
'''

PREFILL_EXAMPLE = '''
import torch
import flashinfer
num_layers = 32
num_qo_heads = 64
num_kv_heads = 16
head_dim = 128
max_num_pages = 128
page_size = 16
# allocate 128MB workspace buffer
workspace_buffer = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
    workspace_buffer, "NHD"
)
batch_size = 7
nnz_qo = 100
qo_indptr = torch.tensor(
    [0, 33, 44, 55, 66, 77, 88, nnz_qo], dtype=torch.int32, device="cuda:0"
)
paged_kv_indices = torch.arange(max_num_pages).int().to("cuda:0")
paged_kv_indptr = torch.tensor(
    [0, 17, 29, 44, 48, 66, 100, 128], dtype=torch.int32, device="cuda:0"
)
# 1 <= paged_kv_last_page_len <= page_size
paged_kv_last_page_len = torch.tensor(
    [1, 7, 14, 4, 3, 1, 16], dtype=torch.int32, device="cuda:0"
)
q_at_layer = torch.randn(num_layers, nnz_qo, num_qo_heads, head_dim).half().to("cuda:0")
kv_cache_at_layer = torch.randn(
    num_layers, max_num_pages, 2, page_size, num_kv_heads, head_dim, dtype=torch.float16, device="cuda:0"
)
# create auxiliary data structures for batch prefill attention
prefill_wrapper.plan(
    qo_indptr,
    paged_kv_indptr,
    paged_kv_indices,
    paged_kv_last_page_len,
    num_qo_heads,
    num_kv_heads,
    head_dim,
    page_size,
    causal=True,
)
outputs = []
for i in range(num_layers):
    q = q_at_layer[i]
    kv_cache = kv_cache_at_layer[i]
    # compute batch prefill attention, reuse auxiliary data structures
    o = prefill_wrapper.run(q, kv_cache)
    outputs.append(o)

assert outputs[0].shape == torch.Size([100, 64, 128])

# below is another example of creating custom mask for batch prefill attention
mask_arr = []
qo_len = (qo_indptr[1:] - qo_indptr[:-1]).cpu().tolist()
kv_len = (page_size * (paged_kv_indptr[1:] - paged_kv_indptr[:-1] - 1) + paged_kv_last_page_len).cpu().tolist()
for i in range(batch_size):
    mask_i = torch.tril(
        torch.full((qo_len[i], kv_len[i]), True, device="cuda:0"),
        diagonal=(kv_len[i] - qo_len[i]),
    )
    mask_arr.append(mask_i.flatten())

mask = torch.cat(mask_arr, dim=0)
prefill_wrapper.plan(
    qo_indptr,
    paged_kv_indptr,
    paged_kv_indices,
    paged_kv_last_page_len,
    num_qo_heads,
    num_kv_heads,
    head_dim,
    page_size,
    custom_mask=mask,
)
for i in range(num_layers):
    q = q_at_layer[i]
    kv_cache = kv_cache_at_layer[i]
    # compute batch prefill attention, reuse auxiliary data structures
    o_custom = prefill_wrapper.run(q, kv_cache)
    assert torch.allclose(o_custom, outputs[i], rtol=1e-3, atol=1e-3)
'''

RAGGED_EXAMPLE = '''
import torch
import flashinfer
num_layers = 32
num_qo_heads = 64
num_kv_heads = 16
head_dim = 128
# allocate 128MB workspace buffer
workspace_buffer = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
prefill_wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
    workspace_buffer, "NHD"
)
batch_size = 7
nnz_kv = 100
nnz_qo = 100
qo_indptr = torch.tensor(
    [0, 33, 44, 55, 66, 77, 88, nnz_qo], dtype=torch.int32, device="cuda:0"
)
kv_indptr = qo_indptr.clone()
q_at_layer = torch.randn(num_layers, nnz_qo, num_qo_heads, head_dim).half().to("cuda:0")
k_at_layer = torch.randn(num_layers, nnz_kv, num_kv_heads, head_dim).half().to("cuda:0")
v_at_layer = torch.randn(num_layers, nnz_kv, num_kv_heads, head_dim).half().to("cuda:0")
# create auxiliary data structures for batch prefill attention
prefill_wrapper.plan(
    qo_indptr,
    kv_indptr,
    num_qo_heads,
    num_kv_heads,
    head_dim,
    causal=True,
)
outputs = []
for i in range(num_layers):
    q = q_at_layer[i]
    k = k_at_layer[i]
    v = v_at_layer[i]
    # compute batch prefill attention, reuse auxiliary data structures
    o = prefill_wrapper.run(q, k, v)
    outputs.append(o)

assert outputs[0].shape == torch.Size([100, 64, 128])

# below is another example of creating custom mask for batch prefill attention
mask_arr = []
qo_len = (qo_indptr[1:] - qo_indptr[:-1]).cpu().tolist()
kv_len = (kv_indptr[1:] - kv_indptr[:-1]).cpu().tolist()
for i in range(batch_size):
    mask_i = torch.tril(
        torch.full((qo_len[i], kv_len[i]), True, device="cuda:0"),
        diagonal=(kv_len[i] - qo_len[i]),
    )
    mask_arr.append(mask_i.flatten())

mask = torch.cat(mask_arr, dim=0)
prefill_wrapper.plan(
    qo_indptr,
    kv_indptr,
    num_qo_heads,
    num_kv_heads,
    head_dim,
    custom_mask=mask
)
outputs_custom_mask = []
for i in range(num_layers):
    q = q_at_layer[i]
    k = k_at_layer[i]
    v = v_at_layer[i]
    # compute batch prefill attention, reuse auxiliary data structures
    o_custom = prefill_wrapper.run(q, k, v)
    assert torch.allclose(o_custom, outputs[i], rtol=1e-3, atol=1e-3)
# (The docstring ends with `outputs_custom_mask[0].shape`, but its loop never
# appends to that list: the line raises IndexError under FlashInfer too, so
# it is left out here.)
'''

MLA_EXAMPLE = '''
import torch
import flashinfer
num_local_heads = 128
batch_size = 114
head_dim_ckv = 512
head_dim_kpe = 64
page_size = 1
mla_wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(
    torch.empty(128 * 1024 * 1024, dtype=torch.int8).to(0),
    backend="fa2"
)
q_indptr = torch.arange(0, batch_size + 1).to(0).int() # for decode, each query length is 1
kv_lens = torch.full((batch_size,), 999, dtype=torch.int32).to(0)
kv_indptr = torch.arange(0, batch_size + 1).to(0).int() * 999
kv_indices = torch.arange(0, batch_size * 999).to(0).int()
q_nope = torch.randn(
    batch_size * 1, num_local_heads, head_dim_ckv, dtype=torch.bfloat16, device="cuda"
)
q_pe = torch.zeros(
    batch_size * 1, num_local_heads, head_dim_kpe, dtype=torch.bfloat16, device="cuda"
)
ckv = torch.randn(
    batch_size * 999, 1, head_dim_ckv, dtype=torch.bfloat16, device="cuda"
)
kpe = torch.zeros(
    batch_size * 999, 1, head_dim_kpe, dtype=torch.bfloat16, device="cuda"
)
sm_scale = 1.0 / ((128 + 64) ** 0.5)  # use head dimension before matrix absorption
mla_wrapper.plan(
    q_indptr,
    kv_indptr,
    kv_indices,
    kv_lens,
    num_local_heads,
    head_dim_ckv,
    head_dim_kpe,
    page_size,
    False,  # causal
    sm_scale,
    q_nope.dtype,
    ckv.dtype,
)
o = mla_wrapper.run(q_nope, q_pe, ckv, kpe, return_lse=False)
assert o.shape == torch.Size([114, 128, 512])
'''


def run_example(src):
    """run_example runs a FlashInfer example with attnc as flashinfer and
    CPU tensors; it returns the example's variables."""
    import attnc
    saved = sys.modules.get("flashinfer")
    sys.modules["flashinfer"] = attnc
    try:
        env = {}
        src = src.replace('"cuda:0"', '"cpu"').replace('device="cuda"', 'device="cpu"').replace(".to(0)", '.to("cpu")')
        exec(compile(src, "<flashinfer example>", "exec"), env)
        return env
    finally:
        if saved is None:
            del sys.modules["flashinfer"]
        else:
            sys.modules["flashinfer"] = saved


def reference_layer(q, kv, kv_indptr, kv_indices, last, qo_indptr, page_size, causal=True):
    """reference_layer is attention over a [pages, 2, page_size, heads, d]
    cache in float64 (f16 inputs read exactly)."""
    q = q.numpy().astype(np.float64)
    kv = kv.numpy()
    hq, d = q.shape[1], q.shape[2]
    hk = kv.shape[3]
    g = hq // hk
    out = np.zeros_like(q)
    vmax = 0.0
    for b in range(len(last)):
        ids = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]
        n = (len(ids) - 1) * page_size + last[b]
        k = kv[ids, 0].reshape(-1, hk, d)[:n].astype(np.float64).transpose(1, 2, 0)  # [hk, d, n]
        v = kv[ids, 1].reshape(-1, hk, d)[:n].astype(np.float64).transpose(1, 0, 2)  # [hk, n, d]
        vmax = max(vmax, np.abs(v).max())
        qb = q[qo_indptr[b]:qo_indptr[b + 1]]
        nq = len(qb)
        qpos = n - nq + np.arange(nq)
        vis = np.arange(n)[None, :] <= qpos[:, None] if causal else np.ones((nq, n), bool)
        qg = qb.reshape(nq, hk, g, d).transpose(1, 2, 0, 3)  # [hk, g, nq, d]
        s = (qg @ k[:, None]) / np.sqrt(d)  # [hk, g, nq, n]
        s = np.where(vis, s, -np.inf)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        o = (w @ v[:, None]) / w.sum(axis=-1, keepdims=True)  # [hk, g, nq, d]
        out[qo_indptr[b]:qo_indptr[b + 1]] = o.transpose(2, 0, 1, 3).reshape(nq, hq, d)
    return out, vmax


@unittest.skipIf(torch is None, "the FlashInfer examples use torch")
class ExamplesTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def test_batch_decode_example(self):
        env = run_example(DECODE_EXAMPLE)
        indptr = env["kv_page_indptr"].numpy()
        indices = env["kv_page_indices"].numpy()
        last = env["kv_last_page_len"].numpy()
        self.assertEqual(len(env["outputs"]), 32)
        # The example draws q inside its loop; the last layer's is still
        # bound to q.
        q = env["q"]
        o = env["outputs"][31]
        want, vmax = reference_layer(q, env["kv_cache_at_layer"][31], indptr, indices, last, np.arange(8), 16)
        ref.check_close(self, o.numpy(), want, "f16", vmax=vmax)
        # Every layer: run the same wrapper again on fresh queries.
        w = env["decode_wrapper"]
        for i in range(32):
            q = torch.randn(7, 64, 128).half()
            o = w.run(q, env["kv_cache_at_layer"][i])
            want, vmax = reference_layer(q, env["kv_cache_at_layer"][i], indptr, indices, last, np.arange(8), 16)
            ref.check_close(self, o.numpy(), want, "f16", vmax=vmax, what="layer %d o" % i)

    def test_batch_prefill_example(self):
        env = run_example(PREFILL_EXAMPLE)
        indptr = env["paged_kv_indptr"].numpy()
        indices = env["paged_kv_indices"].numpy()
        last = env["paged_kv_last_page_len"].numpy()
        qo = env["qo_indptr"].numpy()
        w = env["prefill_wrapper"]  # planned with the custom mask last
        for i in range(32):
            want, vmax = reference_layer(env["q_at_layer"][i], env["kv_cache_at_layer"][i], indptr, indices, last, qo, 16)
            ref.check_close(self, env["outputs"][i].numpy(), want, "f16", vmax=vmax, what="layer %d o" % i)
            o_custom = w.run(env["q_at_layer"][i], env["kv_cache_at_layer"][i])
            ref.check_close(self, o_custom.numpy(), want, "f16", vmax=vmax, what="layer %d o_custom" % i)

    def test_batch_ragged_prefill_example(self):
        env = run_example(RAGGED_EXAMPLE)
        qo = env["qo_indptr"].numpy()
        kv = env["kv_indptr"].numpy()
        self.assertEqual(len(env["outputs"]), 32)
        w = env["prefill_wrapper"]  # planned with the custom mask last
        for i in range(32):
            q = env["q_at_layer"][i].numpy().astype(np.float64)
            k = env["k_at_layer"][i].numpy().astype(np.float64)
            v = env["v_at_layer"][i].numpy().astype(np.float64)
            want = np.zeros_like(q)
            for b in range(7):
                nq, nk = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
                vis = np.arange(nk)[None, :] <= (nk - nq + np.arange(nq))[:, None]
                want[qo[b]:qo[b + 1]] = ref.attend(q[qo[b]:qo[b + 1]], k[kv[b]:kv[b + 1]], v[kv[b]:kv[b + 1]], vis,
                                                   1 / np.sqrt(128))[0]
            vmax = np.abs(v).max()
            ref.check_close(self, env["outputs"][i].numpy(), want, "f16", vmax=vmax, what="layer %d o" % i)
            o_custom = w.run(env["q_at_layer"][i], env["k_at_layer"][i], env["v_at_layer"][i])
            ref.check_close(self, o_custom.numpy(), want, "f16", vmax=vmax, what="layer %d o_custom" % i)

    def test_mla_example(self):
        env = run_example(MLA_EXAMPLE)
        o = env["o"]
        self.assertEqual(o.dtype, torch.bfloat16)
        bits = o.view(torch.int16).numpy().view(np.uint16)
        qn = ref.bf16_to_f64(env["q_nope"].view(torch.int16).numpy().view(np.uint16))
        ckv = ref.bf16_to_f64(env["ckv"].view(torch.int16).numpy().view(np.uint16))[:, 0]  # [114*999, 512]
        self.assertFalse(env["q_pe"].any() or env["kpe"].any())  # the example's rope parts are zero
        scale = 1.0 / ((128 + 64) ** 0.5)
        vmax = np.abs(ckv).max()
        # Every 8th request (and the last) against the float64 reference:
        # softmax(q_nope·ckvᵀ·scale)·ckv over its 999 rows (pages of one row).
        for b in list(range(0, 114, 8)) + [113]:
            c = ckv[b * 999:(b + 1) * 999]
            s = qn[b] @ c.T * scale  # [128, 999]
            w = np.exp(s - s.max(axis=1, keepdims=True))
            want = (w @ c) / w.sum(axis=1, keepdims=True)
            ref.check_close(self, bits[b], want, "bf16", vmax=vmax, what="request %d o" % b)


if __name__ == "__main__":
    unittest.main()
