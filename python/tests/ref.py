"""The float64 reference the Python tests compare with: gather each
sequence's pages into a dense history, then softmax(Q·Kᵀ·scale)·V per head
over the positions the mask allows; plus bf16/f16 rounding helpers and the
comparison rule (f32: 1e-5 of max(1, |want|); f16/bf16: half an ulp of the
storage type at the exact value plus 2^-20 of the largest |v|)."""

import math
import os
import unittest

import numpy as np

LN2 = math.log(2.0)


def long(what):
    """long marks a test method the default go test ./... leaves to
    go test ./python -python.all (CI's long pass, which sets
    ATTNC_PYTHON_ALL=1); python_test.go's pythonLongTests lists them."""
    return unittest.skipUnless(os.environ.get("ATTNC_PYTHON_ALL") == "1",
                               "with go test ./python -python.all (CI's long pass): " + what)


def bf16_round(x):
    """bf16_round rounds float values to bf16 (nearest even) and returns the
    uint16 bit patterns."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, np.float32))
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    r = np.where(nan, 0x7FC0, r)
    return r.astype(np.uint16)


def bf16_to_f64(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def stored(x, dtype):
    """stored is the float64 value of an array as the kernels read it."""
    if dtype == "bf16":
        return bf16_to_f64(x)
    return np.asarray(x).astype(np.float64)


def make(rng, shape, dtype, scale=1.0):
    """make draws a random array in dtype's storage (bf16: uint16 bits)."""
    x = rng.standard_normal(shape).astype(np.float32) * scale
    if dtype == "bf16":
        return bf16_round(x)
    return x.astype({"f32": np.float32, "f16": np.float16}[dtype])


def gather(pages, indices, kv_len, page_size, layout):
    """gather returns a sequence's dense [kv_len, heads, d] history."""
    rows = []
    for j in range(kv_len):
        p = indices[j // page_size]
        off = j % page_size
        rows.append(pages[p, off] if layout == "NHD" else pages[p, :, off])
    if not rows:
        return np.zeros((0,) + ((pages.shape[2], pages.shape[3]) if layout == "NHD" else (pages.shape[1], pages.shape[3])))
    return np.stack(rows)


def rope(x, pos, theta, scale=1.0):
    """rope rotates [n, heads, d] rows rotate_half-style at positions pos."""
    d = x.shape[-1]
    i = np.arange(d // 2)
    f = theta ** (-2.0 * i / d) / scale
    ang = np.asarray(pos, np.float64)[:, None] * f[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def attend(q, k, v, visible, scale, softcap=0.0, lse_base=2):
    """attend is one sequence's attention: q [nq, hq, d], k/v [nk, hk, d],
    visible [nq, nk] (or [hq, nq, nk]) bools; returns o [nq, hq, dv] and lse
    [nq, hq] in lse_base."""
    nq, hq, _ = q.shape
    hk = k.shape[1]
    g = hq // hk
    o = np.zeros((nq, hq, v.shape[2]))
    lse = np.full((nq, hq), -np.inf)
    for h in range(hq):
        s = q[:, h, :] @ k[:, h // g, :].T * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        vis = visible if visible.ndim == 2 else visible[h]
        s = np.where(vis, s, -np.inf)
        for i in range(nq):
            if not vis[i].any():
                continue
            m = s[i].max()
            w = np.exp(s[i] - m)
            o[i, h] = w @ v[:, h // g, :] / w.sum()
            lse[i, h] = m + math.log(w.sum())
    if lse_base == 2:
        lse = lse / LN2
    return o, lse


def ulp(x, dtype):
    x = np.asarray(x, np.float64)
    e = np.where(x == 0, -1e4, np.frexp(x)[1] - 1.0)  # floor(log2|x|)
    if dtype == "f16":
        return 2.0 ** np.maximum(e - 10, -24)
    if dtype == "bf16":
        return 2.0 ** np.maximum(e - 7, -133)
    return 2.0 ** (e - 23)


def check_close(tc, got, want, dtype, vmax=None, what="o"):
    """check_close fails tc unless got (as stored) is within the rule of want."""
    g = stored(got, dtype)
    want = np.asarray(want, np.float64)
    tc.assertEqual(g.shape, want.shape, what + ": shape")
    fin = np.isfinite(want)
    tc.assertTrue(np.array_equal(np.isfinite(g), fin), "%s: finite entries differ" % what)
    tc.assertTrue(np.array_equal(g[~fin], want[~fin]), "%s: non-finite entries differ" % what)
    if dtype == "f32":
        tol = 1e-5 * np.maximum(1.0, np.abs(want))
    else:
        tol = 0.5 * ulp(want, dtype) + 2.0 ** -20 * (vmax if vmax is not None else 1.0)
    err = np.where(fin, np.abs(g - np.where(fin, want, 0)), 0)
    bad = err > np.where(fin, tol, 0)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        tc.fail("%s: %d entries off, first at %s: got %r want %r (tol %r)" % (what, bad.sum(), i, g[i], want[i], tol[i] if np.ndim(tol) else tol))


def check_lse(tc, got, want, what="lse"):
    check_close(tc, np.asarray(got, np.float32), want, "f32", what=what)


def page_table(rng, kv_lens, page_size, num_pages, shuffle=True):
    """page_table hands out distinct pages for each kv_len (CSR form)."""
    need = [(n + page_size - 1) // page_size for n in kv_lens]
    ids = rng.permutation(num_pages) if shuffle else np.arange(num_pages)
    assert sum(need) <= num_pages
    indptr = np.concatenate([[0], np.cumsum(need)]).astype(np.int32)
    indices = ids[: sum(need)].astype(np.int32)
    last = np.array([(n - (k - 1) * page_size) if k else 0 for n, k in zip(kv_lens, need)], np.int32)
    return indptr, indices, last
