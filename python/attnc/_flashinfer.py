"""FlashInfer's Python API over attnc kernels: the paged prefill and decode
wrappers, the ragged-KV prefill wrapper (attnc's prefill_ragged kernel) and
the MLA paged wrapper (attnc's mla variants), constructed, planned and run
with FlashInfer's arguments; merge_state, merge_state_in_place, append_paged_kv_cache,
get_batch_indices_positions and get_seq_lens.

plan() writes an attnc spec for its arguments (FlashInfer's semantics: lse
in base 2, window_left, soft cap after sm_scale, ROPE_LLAMA), compiles it
through the cache on first use and keeps the page table on the host; run()
calls the kernel. What FlashInfer accepts and attnc cannot serve raises
NotImplementedError naming the option; performance hints are accepted.

On CUDA tensors (a workspace buffer on a CUDA device, or CUDA inputs to
merge_state and append_paged_kv_cache) the same specs are compiled for
target cuda and the page tables are copied to the device once per plan; a
plan(..., variant=v) with a cuda-emu Variant runs the CUDA launchers on the
emulator over host arrays.
"""

import math
import re

import numpy as np

from . import _arrays as A
from ._core import Variant, compile

__all__ = [
    "BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper", "BatchMLAPagedAttentionWrapper",
    "merge_state", "merge_state_in_place", "append_paged_kv_cache",
    "get_batch_indices_positions", "get_seq_lens", "merge_states",
    "single_decode_with_kv_cache", "single_prefill_with_kv_cache",
]

_VARIANT_NAME = "fi_paged"
_variants = {}  # (spec text, target) -> Variant


def _variant(spec, target="cpu"):
    v = _variants.get((spec, target))
    if v is None:
        v = compile(spec, target=target)[_VARIANT_NAME]
        _variants[(spec, target)] = v
    return v


def _target_of(x):
    """_target_of is the target serving buffers like x: cuda for a torch CUDA
    tensor, else cpu."""
    return "cuda" if A.is_cuda(x) else "cpu"


def _table(host, device, cache=None, key=None):
    """_table is the pointer a kernel reads an int32 host table through: the
    numpy array itself, or (device given) a copy on that device, kept in
    cache[key] so that it lives as long as the plan."""
    if device is None:
        return host.ctypes.data
    ck = (key, str(device))
    t = cache.get(ck) if cache is not None else None
    if t is None:
        t = A.torch_module().from_numpy(np.ascontiguousarray(host)).to(device)
        if cache is not None:
            cache[ck] = t
    return t.data_ptr(), t


def _outputs(out, lse, return_lse, o_shape, dt, like_torch, device, gpu):
    """_outputs checks the caller's out ([o_shape] of dtype dt) and lse
    (float32 [o_shape[:2]]) or allocates them like q (lse only when it is
    wanted), and returns (out, lse, want_lse); on a GPU plan both must sit
    on q's device."""
    if out is not None:
        out = A.as_array(out, "out")
        if not A.dtype_ok(out, dt) or tuple(out.shape) != o_shape:
            raise ValueError("out: expected %s %s, got %s" % (A.DTYPE_WORDS[dt], list(o_shape), A.describe(out)))
    else:
        out = A.empty(o_shape, dt, like_torch, device)
    want_lse = return_lse or lse is not None
    if lse is not None:
        lse = A.as_array(lse, "lse")
        if not A.dtype_ok(lse, "f32") or tuple(lse.shape) != o_shape[:2]:
            raise ValueError("lse: expected float32 %s, got %s" % (list(o_shape[:2]), A.describe(lse)))
    elif want_lse:
        lse = A.empty(o_shape[:2], "f32", like_torch, device)
    if gpu:
        for name, x in (("out", out), ("lse", lse)):
            if x is not None and (not A.is_cuda(x) or x.device != device):
                raise ValueError("%s: expected a CUDA tensor on %s (q's device), got %s" % (name, device, A.describe(x)))
    return out, lse, want_lse


def _call_kernel(v, role, ka, device):
    """_call_kernel calls variant v's kernel for role with the arguments
    ka names (by the manifest's argument names; the launch stream added on
    a GPU target), raising the variant's error for a nonzero status and
    NotImplementedError for an argument the wrapper cannot supply."""
    kern = v.kernels[role]
    if v.target != "cpu":
        ka["stream"] = _launch_stream(kern, device)
    cargs = []
    for a in kern.args:
        if a.name not in ka:
            raise NotImplementedError("variant %s's %s takes %s, which the FlashInfer wrapper cannot supply; "
                                      "call variant.%s(...) directly" % (v.name, kern.role, a.name, kern.role))
        cargs.append(ka[a.name])
    st = kern._fn(*cargs)
    if st != 0:
        raise v._error(st, kern.role)


def _check_supplied(p, names):
    """_check_supplied raises NotImplementedError, at plan time, when the
    planned kernel takes an argument that run() will not supply: names are
    the arguments the wrapper's run passes (the inline-RoPE positions and
    the packed custom mask added when the plan has them), so a variant
    with learned sinks, a param or a tree mask's tables is refused here
    rather than at its first run (_call_kernel checks again)."""
    v = p["variant"]
    kern = v.kernels[p["kernel"]]
    have = set(names) | {"batch_size", "o", "lse"}
    if v.target != "cpu":
        have.add("stream")
    if "q_rope_position" in p:
        have |= {"q_rope_position", "k_rope_pos_offset"}
    if p["cfg"].get("custom"):
        have |= {"custom_mask", "mask_indptr"}
    params = {str(x).split()[0] for x in v.constraints.get("params", []) if str(x).split()}
    missing = []
    for a in kern.arg_names:
        if a in have:
            continue
        if a == "sinks":
            missing.append("sinks (its learned sinks; run's sinks= is not served)")
        elif a in params:
            missing.append("%s (its param %s)" % (a, a))
        else:
            missing.append(a)
    if missing:
        raise NotImplementedError("variant %s's %s kernel takes %s, which the FlashInfer wrapper cannot supply; "
                                  "call variant.%s(...) directly" % (v.name, kern.role, ", ".join(missing), kern.role))


def _launch_stream(kern, device):
    """_launch_stream is the stream argument of a CUDA launcher (torch's
    current stream on device; None, i.e. 0, on the emulator)."""
    return kern._stream(None, device)


def _num(x):
    """_num writes a float as the DSL reads it (no exponent)."""
    return np.format_float_positional(float(x), unique=True, trim="0")


_DTYPE_WORDS = {
    "float16": "f16", "half": "f16", "fp16": "f16", "f16": "f16",
    "bfloat16": "bf16", "bf16": "bf16",
    "float32": "f32", "float": "f32", "fp32": "f32", "f32": "f32",
}


def _dtype(x, what):
    """_dtype canonicalizes a FlashInfer dtype argument (torch dtype, numpy
    dtype or string) to attnc's name."""
    if x is None:
        return None
    s = str(x)
    if s.startswith("torch."):
        s = s[len("torch."):]
    try:
        s = np.dtype(x).name if not isinstance(x, str) and not s.startswith(("bfloat", "float8")) else s
    except TypeError:
        pass
    d = _DTYPE_WORDS.get(s.lower())
    if d is None:
        if "float8" in s or "fp8" in s or "int8" in s or "uint8" in s:
            raise NotImplementedError(
                "%s=%s: 8-bit KV caches are served by attnc.compile (cache paged(kv_dtype = e4m3 | e5m2 | i8)), "
                "not by the FlashInfer wrappers" % (what, x))
        raise ValueError("%s: unknown data type %r (float16, bfloat16 or float32)" % (what, x))
    return d


def _host_i32(x, name, ndim=1):
    if x is None:
        raise ValueError("%s: missing" % name)
    a = A.to_numpy(A.as_array(x, name))
    if a.ndim != ndim:
        raise ValueError("%s: expected a %d-D integer array, got shape %s" % (name, ndim, list(a.shape)))
    if a.dtype.kind not in "iu":
        raise ValueError("%s: expected an integer array (int32), got %s" % (name, a.dtype))
    a64 = a.astype(np.int64)
    if a64.size and (a64.min() < -(1 << 31) or a64.max() >= (1 << 31)):
        raise ValueError("%s: values must fit in int32" % name)
    return np.ascontiguousarray(a64.astype(np.int32))


def _refuse(name, value, default, why="a GPU-only option"):
    if default is None:
        if value is None:
            return
    elif value is default or (not hasattr(value, "shape") and value == default):
        return
    shown = "<%s>" % type(value).__name__ if hasattr(value, "shape") else repr(value)
    raise NotImplementedError("%s=%s: %s; attnc's CPU kernels do not serve it" % (name, shown, why))


def _spec(cfg):
    """_spec writes the attnc spec for a plan's configuration."""
    lines = ["variant %s {" % _VARIANT_NAME,
             "  heads qo = %d, kv = %d" % (cfg["qo"], cfg["kv"])]
    if cfg["dqk"] == cfg["dv"]:
        lines.append("  head_dim %d" % cfg["dqk"])
    else:
        lines.append("  head_dim qk = %d, v = %d" % (cfg["dqk"], cfg["dv"]))
    lines.append("  dtype %s" % cfg["dtype"])
    lines.append("  cache paged(page_size = %d, layout = %s)" % (cfg["page_size"], cfg["layout"]))
    w = cfg["window"]
    if cfg["custom"]:
        mask = "custom" + (", expr(q_pos - kv_pos <= %d)" % w if w >= 0 else "")
    elif cfg["causal"]:
        mask = "window(left = %d)" % w if w >= 0 else "causal"
    else:
        mask = "expr(q_pos - kv_pos <= %d)" % w if w >= 0 else "none"
    lines.append("  mask %s" % mask)
    if cfg["softcap"] > 0:
        lines.append("  score softcap(score, %s)" % _num(cfg["softcap"]))
    lines.append("  scale %s" % _num(cfg["scale"]))
    if cfg["rope"] is not None:
        lines.append(_spec_rope(*cfg["rope"]))
    lines.append("  lse base = 2")
    lines.append("  kernels %s" % cfg.get("kernels", "prefill, decode"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _spec_rope(theta, rscale):
    """_spec_rope is the rope line of ROPE_LLAMA at theta and rope_scale."""
    if rscale == 1:
        return "  rope inline(theta = %s)" % _num(theta)
    # FlashInfer divides every frequency by rope_scale: Llama 3.1's
    # rescaling with every wavelength above original_max / low_freq.
    return ("  rope inline(theta = %s, style = llama3, factor = %s, low_freq = 1, high_freq = 2, "
            "original_max = 0.000001)" % (_num(theta), _num(rscale)))


def _check_variant(v, cfg, roles):
    """_check_variant checks that a caller's Variant agrees with the plan:
    shapes, dtype, page size and layout, the scale (FlashInfer's default
    1/sqrt(head_dim) when sm_scale is None), and every setting that decides
    the values (_check_semantics); a disagreement is a ValueError naming
    both sides."""
    if not isinstance(v, Variant):
        raise ValueError("variant: expected an attnc.Variant (attnc.compile(spec)[name]), got %s" % type(v).__name__)
    c = v.constraints
    for key, want, what in (("qo_heads", cfg["qo"], "num_qo_heads"), ("kv_heads", cfg["kv"], "num_kv_heads"),
                            ("head_dim_qk", cfg["dqk"], "head_dim"), ("head_dim_v", cfg["dv"], "head_dim_vo"),
                            ("page_size", cfg["page_size"], "page_size"), ("layout", cfg["layout"], "kv_layout"),
                            ("dtype", cfg["dtype"], "q_data_type")):
        if key in c and c[key] != want:
            raise ValueError("variant %s has %s = %r, but the plan's %s is %r" % (v.name, key, c[key], what, want))
    _check_scale(v, cfg["scale"])
    _check_semantics(v, cfg, decode=roles == ["decode"])
    for r in roles:
        if r not in v.kernels:
            raise ValueError("variant %s has no %s kernel (add it to its kernels line)" % (v.name, r))


def _check_scale(v, scale):
    c = v.constraints
    if "scale" in c and abs(c["scale"] - scale) > 1e-6 * abs(scale):
        raise ValueError("variant %s has scale %r, but the plan's sm_scale is %r (FlashInfer's default is "
                         "1/sqrt(head_dim))" % (v.name, c["scale"], scale))


def _mask_of(v):
    """_mask_of reads a variant's mask from its manifest constraints as
    (causal, window_left, custom): the mask clauses a FlashInfer plan can
    say (causal, none, window(left = W), custom, expr(q_pos - kv_pos <= W),
    the non-causal window); any other clause is a ValueError."""
    clauses = v.constraints.get("mask")
    if clauses is None:
        raise ValueError("variant %s's manifest does not record its mask (built by an older attnc): rebuild it "
                         "to pass it as plan(..., variant=v)" % v.name)
    causal, window, custom = False, -1, False
    for cl in clauses:
        w = None
        m = re.fullmatch(r"window\(left = (\d+)\)", cl) or re.fullmatch(r"expr\(\(q_pos - kv_pos\) <= (\d+)\)", cl)
        if cl == "causal":
            causal = True
        elif cl == "custom":
            custom = True
        elif m:
            w = int(m.group(1))
            causal = causal or cl.startswith("window")
        elif cl != "none":
            raise ValueError("variant %s has mask %s, which a FlashInfer plan cannot say (it says causal, "
                             "window_left and a custom mask)" % (v.name, cl))
        if w is not None:
            window = w if window < 0 else min(window, w)
    return causal, window, custom


def _mask_words(causal, window, custom):
    words = ["custom mask" if custom else "causal" if causal else "no mask"]
    if window >= 0:
        words.append("window_left = %d" % window)
    return ", ".join(words)


_SOFTCAP = re.compile(r"@softcap\.f32\(score, ([^:()]+):f32\)")


def _check_semantics(v, cfg, decode=False):
    """_check_semantics checks the settings that decide a variant's values
    against the plan's: the mask (causal, window_left, custom mask; in
    decode, whose query sits at the last cached position, causal and no
    mask agree), the logits soft cap, RoPE (none, at append, or inline with
    the plan's theta and scale) and the cache's dtype. What a plan cannot
    say a variant may add: a score expression other than a soft cap (ALiBi,
    say) and sinks."""
    c = v.constraints
    vc, vw, vcustom = _mask_of(v)
    pc, pw, pcustom = cfg["causal"], cfg["window"], cfg["custom"]
    if (vc != pc and not decode) or (vw, vcustom) != (pw, pcustom):
        raise ValueError("variant %s has mask %s (%s), but the plan asks for %s"
                         % (v.name, ", ".join(c["mask"]), _mask_words(vc, vw, vcustom), _mask_words(pc, pw, pcustom)))
    score = c.get("score", "score")
    m = _SOFTCAP.fullmatch(score)
    cap = cfg.get("softcap", 0.0)
    if cap > 0:
        if not m or abs(float(m.group(1)) - cap) > 1e-6 * cap:
            raise ValueError("variant %s has score %s, but the plan's logits_soft_cap is %s (score softcap(score, %s))"
                             % (v.name, score, _num(cap), _num(cap)))
    elif "@softcap" in score:
        raise ValueError("variant %s has score %s, but the plan's logits_soft_cap is None" % (v.name, score))
    want = cfg.get("rope")
    rope = c.get("rope")
    if want is None:
        if rope == "inline":
            raise ValueError("variant %s rotates q and k inline (rope inline, theta %s), but the plan's "
                             "pos_encoding_mode is 'NONE'" % (v.name, c.get("rope_theta")))
    else:
        theta, rscale = want
        got = None
        if rope == "inline" and c.get("rope_pairs") == "half" and c.get("rope_dim") == cfg["dqk"]:
            got = (c.get("rope_style"), c.get("rope_theta"), c.get("rope_params", {}))
        wanted = ("normal", theta, {}) if rscale == 1 else \
            ("llama3", theta, {"factor": rscale, "low_freq": 1, "high_freq": 2, "original_max": 1e-6})
        if got is None or got[0] != wanted[0] or not _close(got[1], wanted[1]) or sorted(got[2]) != sorted(wanted[2]) \
                or not all(_close(got[2][k], x) for k, x in wanted[2].items()):
            have = "no inline rope"
            if rope == "inline":
                words = ["theta = %s" % c.get("rope_theta"), "style = %s" % c.get("rope_style")]
                words += ["%s = %s" % kv for kv in sorted(c.get("rope_params", {}).items())]
                words += ["pairs = %s" % c.get("rope_pairs"), "rotary_dim = %s" % c.get("rope_dim")]
                have = "rope inline(%s)" % ", ".join(words)
            raise ValueError("variant %s has %s, but the plan asks for ROPE_LLAMA with rope_theta = %s, rope_scale = %s "
                             "(%s)" % (v.name, have, _num(theta), _num(rscale), _spec_rope(theta, rscale).strip()))
    if c.get("kv_dtype", cfg["dtype"]) != cfg["dtype"]:
        raise ValueError("variant %s stores K/V as %s codes, but the plan's kv_data_type is %s"
                         % (v.name, c["kv_dtype"], A.DTYPE_WORDS[cfg["dtype"]]))


def _close(a, b):
    return a is not None and abs(float(a) - float(b)) <= 1e-9 * max(abs(float(b)), 1e-300)


def _check_lse_base(v, want):
    """_check_lse_base refuses an lse from a caller's variant in another base
    than the one asked for."""
    if v.lse_base != want:
        raise ValueError("variant %s writes lse in base %s (lse base = %s), but the plan returns it in base %s"
                         % (v.name, v.lse_base, v.lse_base, want))


def _unpack_cache(paged_kv_cache):
    if isinstance(paged_kv_cache, (tuple, list)):
        if len(paged_kv_cache) != 2:
            raise ValueError("paged_kv_cache: expected (k_cache, v_cache), got %d tensors" % len(paged_kv_cache))
        return paged_kv_cache[0], paged_kv_cache[1]
    x = A.as_array(paged_kv_cache, "paged_kv_cache")
    if len(x.shape) != 5 or x.shape[1] != 2:
        raise ValueError("paged_kv_cache: expected a (k_cache, v_cache) tuple or one [num_pages, 2, ...] tensor, got %s"
                         % A.describe(x))
    return x[:, 0], x[:, 1]


class _Pages:
    """_Pages is a K/V pool as the kernels see it: pointers, the pool size in
    page units and the factor m by which page ids scale when the pages are
    strided (k and v interleaved in one [pages, 2, ...] tensor: page p of
    each sits m·p page units past its base)."""

    __slots__ = ("k", "v", "kp", "vp", "num_pages", "m", "pages")


def _pages(k, v, dtype, shape4, what="paged_kv_cache", device=None):
    """_pages validates a K/V pool against [pages, *shape4] and returns _Pages;
    with device (CUDA kernels) both must be CUDA tensors there."""
    out = _Pages()
    keep = []
    ptrs = []
    ms = []
    pages = None
    for name, x in (("k_cache", k), ("v_cache", v)):
        x = A.as_array(x, what)
        if not A.dtype_ok(x, dtype):
            raise ValueError("%s: %s must hold %s, got %s" % (what, name, A.DTYPE_WORDS[dtype], A.describe(x)))
        if len(x.shape) != 4 or tuple(x.shape[1:]) != tuple(shape4):
            raise ValueError("%s: %s must be [num_pages, %s], got %s"
                             % (what, name, ", ".join(map(str, shape4)), A.describe(x)))
        if pages is None:
            pages = x.shape[0]
        elif x.shape[0] != pages:
            raise ValueError("%s: k_cache has %d pages, v_cache %d" % (what, pages, x.shape[0]))
        if device is not None and (not A.is_cuda(x) or x.device != device):
            raise ValueError("%s: %s must be a CUDA tensor on %s (q's device), got %s" % (what, name, device, A.describe(x)))
        ptr, shape, strides, _ = A.view(x, device is not None)
        pe = shape4[0] * shape4[1] * shape4[2]
        inner = strides[3] == 1 and strides[2] == shape4[2] and strides[1] == shape4[1] * shape4[2]
        if pages <= 1:
            m = 1
        elif inner and strides[0] > 0 and strides[0] % pe == 0:
            m = strides[0] // pe
        else:
            x = A.contiguous(x)
            ptr, m = A.view(x, device is not None)[0], 1
        keep.append(x)
        ptrs.append(ptr)
        ms.append(m)
    if ms[0] != ms[1]:
        # Different page strides cannot share one table: copy both.
        keep = [A.contiguous(x) for x in keep]
        ptrs = [A.view(x, device is not None)[0] for x in keep]
        ms = [1, 1]
    out.k, out.v = keep
    out.kp, out.vp = ptrs
    out.m = ms[0]
    out.pages = pages
    n = out.m * (pages - 1) + 1 if pages > 0 else 0
    if n > (1 << 31) - 1:
        raise ValueError("%s: %d pages with stride %d exceed the kernels' int32 page ids" % (what, pages, out.m))
    out.num_pages = n
    return out


def _scaled_indices(indices, m, pages):
    """_scaled_indices maps page ids p to m·p for strided pools; -1 stays -1
    and any id outside 0..pages-1 becomes -2, which the kernels reject."""
    if m == 1:
        return indices
    i64 = indices.astype(np.int64)
    out = np.where((i64 >= 0) & (i64 < pages), i64 * m, np.where(i64 == -1, -1, -2))
    return np.ascontiguousarray(out.astype(np.int32))


def _page_shape(layout, page_size, kv_heads, d):
    return (page_size, kv_heads, d) if layout == "NHD" else (kv_heads, page_size, d)


class _Wrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, backend="auto", jit_args=None):
        if kv_layout not in ("NHD", "HND"):
            raise KeyError("Invalid kv_layout %s" % kv_layout)
        _refuse("use_cuda_graph", use_cuda_graph, False, "CUDA graphs are a GPU feature")
        if backend not in ("auto", "fa2"):
            raise NotImplementedError("backend=%r: a GPU backend; attnc's CPU kernels serve backend='auto'" % (backend,))
        _refuse("jit_args", jit_args, None, "FlashInfer JIT variants are CUDA templates (write the variant as an attnc spec and pass plan(..., variant=v))")
        self._kv_layout = kv_layout
        self._float_workspace_buffer = float_workspace_buffer
        # FlashInfer runs where its workspace lives: a CUDA workspace plans
        # for attnc's cuda target.
        self._target = _target_of(float_workspace_buffer)
        self._plan = None

    @property
    def is_cuda_graph_enabled(self):
        return False

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        self._float_workspace_buffer = float_workspace_buffer
        self._target = _target_of(float_workspace_buffer)

    def end_forward(self):
        pass

    def _setup(self, cfg, kv_indptr, kv_indices, last_page_len, qo_indptr, variant, roles, decode):
        ps = cfg["page_size"]
        if not 1 <= ps:
            raise ValueError("page_size: must be positive, got %d" % ps)
        batch = len(last_page_len)
        if len(kv_indptr) != batch + 1:
            raise ValueError("indptr: expected batch_size + 1 = %d entries (last_page_len has %d), got %d"
                             % (batch + 1, batch, len(kv_indptr)))
        if qo_indptr is not None and len(qo_indptr) != batch + 1:
            raise ValueError("qo_indptr: expected batch_size + 1 = %d entries, got %d" % (batch + 1, len(qo_indptr)))
        if len(kv_indptr) and kv_indptr[-1] > len(kv_indices):
            raise ValueError("indices: indptr[-1] = %d, but indices has %d entries" % (kv_indptr[-1], len(kv_indices)))
        if variant is not None:
            _check_variant(variant, cfg, roles)
            v = variant
        else:
            try:
                v = _variant(_spec(cfg), self._target)
            except Exception as e:
                if "page_size" in str(e):
                    raise NotImplementedError("page_size=%d: %s" % (ps, e)) from e
                raise
        npages = np.diff(kv_indptr.astype(np.int64))
        kv_len = np.where(npages > 0, (npages - 1) * ps + last_page_len.astype(np.int64), 0)
        q_len = np.ones(batch, np.int64) if decode else np.diff(qo_indptr.astype(np.int64))
        p = {"cfg": cfg, "variant": v, "batch": batch, "kv_indptr": kv_indptr, "kv_indices": kv_indices,
             "last": last_page_len, "kv_len": kv_len, "q_len": q_len, "scaled": {}}
        _place_rows(p, cfg, qo_indptr, decode)
        p["kernel"] = "prefill" if (p["keep"] is not None or not decode) else "decode"
        if p["kernel"] not in v.kernels:
            raise NotImplementedError("variant %s has no %s kernel, which this plan needs" % (v.name, p["kernel"]))
        _rope_rows(p, cfg, v)
        names = ["q", "k_pages", "v_pages", "num_pages", "kv_indptr", "kv_indices", "kv_last_page_len"]
        _check_supplied(p, names + (["qo_indptr"] if p["kernel"] == "prefill" else []))
        return p

    def _run(self, q, paged_kv_cache, args, q_scale, k_scale, v_scale, out, lse, return_lse, window_left, sinks):
        p = self._plan
        if p is None:
            raise RuntimeError("run() before plan()")
        if args:
            raise NotImplementedError("run(): extra positional arguments are FlashInfer JIT variant arguments; "
                                      "attnc's wrappers take none")
        _refuse("sinks", sinks, None, "attention sinks through the FlashInfer wrappers are not served (use a spec with `sinks learned`)")
        cfg = p["cfg"]
        v = p["variant"]
        if q_scale is not None or k_scale is not None or (window_left is not None and window_left != cfg["window"]):
            if p.get("user_variant"):
                raise NotImplementedError("q_scale/k_scale/window_left at run() with plan(..., variant=v): "
                                          "compile a variant with that scale or window")
            c2 = dict(cfg)
            c2["scale"] = cfg["scale"] * (1.0 if q_scale is None else float(q_scale)) * (1.0 if k_scale is None else float(k_scale))
            if window_left is not None:
                c2["window"] = int(window_left)
            v = _variant(_spec(c2), v.target)
        q = A.as_array(q, "q")
        like_torch = A.is_torch(q)
        gpu = v.target == "cuda"
        device = None
        if gpu:
            if not A.is_cuda(q):
                raise ValueError("q: the plan runs CUDA kernels (target cuda), which take torch CUDA tensors; got %s"
                                 % A.describe(q))
            device = q.device
        dt = cfg["dtype"]
        if not A.dtype_ok(q, dt):
            raise ValueError("q: planned for %s, got %s" % (A.DTYPE_WORDS[dt], A.describe(q)))
        rows = p["total_q"]
        if len(q.shape) != 3 or q.shape[1] != cfg["qo"] or q.shape[2] != cfg["dqk"] or q.shape[0] < rows:
            raise ValueError("q: expected [%s%d, %d, %d], got %s"
                             % ("" if p["qo_indptr"] is None and p["keep"] is None else ">= ", rows, cfg["qo"], cfg["dqk"], A.describe(q)))
        n = q.shape[0]
        o_shape = (n, cfg["qo"], cfg["dv"])
        out, lse, want_lse = _outputs(out, lse, return_lse, o_shape, dt, like_torch, device, gpu)
        if want_lse and p.get("user_variant"):
            _check_lse_base(v, "2")
        k, vv = _unpack_cache(paged_kv_cache)
        pg = _pages(k, vv, dt, _page_shape(cfg["layout"], cfg["page_size"], cfg["kv"], cfg["dqk"]), device=device)
        if cfg["dv"] != cfg["dqk"]:
            raise NotImplementedError("head_dim_vo != head_dim_qk over a paged cache")
        idx = p["scaled"].get(pg.m)
        if idx is None:
            idx = _scaled_indices(p["kv_indices"], pg.m, pg.pages)
            p["scaled"][pg.m] = idx
        keep = p["keep"]
        if keep is None:
            qk = q[:rows] if n != rows else q
            qk = qk if A.is_contiguous(qk) else A.contiguous(qk)
            ok = out if (n == rows and A.is_contiguous(out)) else A.empty((rows,) + o_shape[1:], dt, like_torch, device)
            lk = None
            if want_lse:
                lk = lse if (n == rows and A.is_contiguous(lse)) else A.empty((rows, cfg["qo"]), "f32", like_torch, device)
        else:
            qk = q[keep] if not like_torch else q[_index(keep, device)]
            qk = A.contiguous(qk)
            ok = A.empty((len(keep),) + o_shape[1:], dt, like_torch, device)
            lk = A.empty((len(keep), cfg["qo"]), "f32", like_torch, device) if want_lse else None
        dev = p.setdefault("device_tables", {})
        held = []  # device copies made for this call only

        def table(host, key):
            got = _table(host, device, dev, key)
            if device is None:
                return got
            held.append(got[1])
            return got[0]

        ka = {
            "q": A.view(qk, gpu)[0], "k_pages": pg.kp, "v_pages": pg.vp, "num_pages": pg.num_pages,
            "kv_indptr": table(p["kv_indptr"], "kv_indptr"), "kv_indices": table(idx, ("kv_indices", pg.m)),
            "kv_last_page_len": table(p["last"], "last"), "batch_size": p["batch"],
            "o": A.view(ok, gpu)[0], "lse": A.view(lk, gpu)[0] if lk is not None else None,
        }
        if p["kernel"] == "prefill":
            ka["qo_indptr"] = table(p["qo_indptr"], "qo_indptr")
        if "q_rope_position" in p:
            qrp = p["q_rope_position"] if p["kernel"] == "prefill" else p["kv_len"].astype(np.int32) - 1
            p.setdefault("_qrp_" + p["kernel"], np.ascontiguousarray(qrp, dtype=np.int32))
            ka["q_rope_position"] = table(p["_qrp_" + p["kernel"]], "qrp_" + p["kernel"])
            ka["k_rope_pos_offset"] = table(p["k_rope_pos_offset"], "k_rope_pos_offset")
        if "custom_mask" in p:
            ka["custom_mask"] = table(p["custom_mask"], "custom_mask")
            ka["mask_indptr"] = table(p["mask_indptr"], "mask_indptr")
        _call_kernel(v, p["kernel"], ka, device)
        if keep is not None:
            _fill(out, 0)
            _scatter(out, keep, ok, like_torch, device)
            if want_lse:
                _fill(lse, -np.inf)
                _scatter(lse, keep, lk, like_torch, device)
        else:
            if ok is not out:
                _fill(out, 0)
                _assign(out, slice(0, rows), ok)
            if want_lse and lk is not lse:
                _fill(lse, -np.inf)
                _assign(lse, slice(0, rows), lk)
        if v_scale is not None:
            out *= v_scale
        return (out, lse) if return_lse else out


def _place_rows(p, cfg, qo_indptr, decode):
    """_place_rows decides which query rows the kernel runs on, from the
    plan's q_len and kv_len (FlashInfer's bottom-right alignment: query i of
    a request sits at kv_len - qo_len + i). Rows that see no position (causal
    rows before the cache, every row of an empty request) give o = 0 and
    lse = -inf without a kernel call; the kernel runs on the others,
    gathered (p["keep"], p["qo_indptr"]). A custom mask or a non-causal
    window on a request with 0 < kv_len < qo_len is refused: attnc's masks
    do not place rows before the cache."""
    q_len, kv_len, batch = p["q_len"], p["kv_len"], p["batch"]
    if cfg["custom"] or (not cfg["causal"] and cfg["window"] >= 0):
        bad = (kv_len > 0) & (q_len > kv_len)
        if bad.any():
            b = int(np.nonzero(bad)[0][0])
            raise NotImplementedError(
                "request %d has qo_len %d > kv_len %d with %s: its first rows sit before the cache, "
                "which attnc's masks do not place" % (b, q_len[b], kv_len[b], "a custom mask" if cfg["custom"] else "a non-causal window"))
        drop = np.where(kv_len == 0, q_len, 0)
    elif cfg["causal"] or decode:
        drop = np.maximum(q_len - kv_len, 0)
    else:
        drop = np.zeros(batch, np.int64)
    qbeg = np.arange(batch, dtype=np.int64) if decode else qo_indptr[:-1].astype(np.int64)
    p["total_q"] = batch if decode else int(qo_indptr[-1]) if batch else 0
    if drop.any():
        keep = np.concatenate([np.arange(qbeg[b] + drop[b], qbeg[b] + q_len[b]) for b in range(batch)]
                              ) if batch else np.zeros(0, np.int64)
        p["keep"] = keep.astype(np.int64)
        p["qo_indptr"] = np.concatenate([[0], np.cumsum(q_len - drop)]).astype(np.int32)
    else:
        p["keep"] = None
        p["qo_indptr"] = None if decode else qo_indptr
    p["kept_q_len"] = q_len - drop


def _rope_rows(p, cfg, v):
    """_rope_rows sets the inline-RoPE positions of the kept rows: query i
    at kv_len - kept_q_len + i, keys at their own positions."""
    if cfg.get("rope") is not None or "q_rope_position" in v.kernels[p["kernel"]].arg_names:
        kv_len, kept = p["kv_len"], p["kept_q_len"]
        pos = [np.arange(kv_len[b] - kept[b], kv_len[b]) for b in range(p["batch"])]
        p["q_rope_position"] = (np.concatenate(pos) if pos else np.zeros(0)).astype(np.int32)
        p["k_rope_pos_offset"] = np.zeros(p["batch"], np.int32)


def _fill(x, val):
    if A.is_torch(x):
        x.fill_(val)
    else:
        x.fill(val)


def _assign(dst, idx, src):
    dst[idx] = src


def _index(keep, device):
    """_index is a torch index tensor of keep's rows (on device when given)."""
    t = A.torch_module().from_numpy(keep)
    return t.to(device) if device is not None else t


def _scatter(dst, keep, src, like_torch, device=None):
    if like_torch:
        dst[_index(keep, device)] = src
    else:
        dst[keep] = src


def _common_cfg(num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, page_size, layout, q_data_type, kv_data_type,
                o_data_type, data_type, pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta):
    if data_type is not None:
        q_data_type = q_data_type if q_data_type is not None else data_type
        kv_data_type = kv_data_type if kv_data_type is not None else data_type
    qd = _dtype(q_data_type if q_data_type is not None else "float16", "q_data_type")
    kd = _dtype(kv_data_type, "kv_data_type") or qd
    od = _dtype(o_data_type, "o_data_type") or qd
    if kd != qd:
        raise NotImplementedError("kv_data_type=%s with q_data_type=%s: attnc's caches store q's type (or 8-bit codes)"
                                  % (kv_data_type, q_data_type))
    if od != qd:
        raise NotImplementedError("o_data_type=%s: attnc writes o in q's type" % (o_data_type,))
    if pos_encoding_mode not in ("NONE", "ROPE_LLAMA"):
        if pos_encoding_mode == "ALIBI":
            raise NotImplementedError("pos_encoding_mode='ALIBI' through the wrappers: write `score score - alibi_slope(head) * "
                                      "(q_pos - kv_pos)` in a spec and pass plan(..., variant=v)")
        raise KeyError("Invalid pos_encoding_mode %s" % pos_encoding_mode)
    dqk = int(head_dim_qk)
    dv = int(head_dim_vo) if head_dim_vo is not None else dqk
    cfg = {
        "qo": int(num_qo_heads), "kv": int(num_kv_heads), "dqk": dqk, "dv": dv, "dtype": qd,
        "page_size": int(page_size), "layout": layout, "window": int(window_left) if window_left is not None else -1,
        "softcap": float(logits_soft_cap) if logits_soft_cap else 0.0,
        "scale": float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dqk),
        "scale_given": sm_scale is not None,
        "rope": None, "causal": True, "custom": False,
    }
    if cfg["window"] < -1:
        raise ValueError("window_left: must be -1 (no window) or >= 0, got %d" % cfg["window"])
    if pos_encoding_mode == "ROPE_LLAMA":
        cfg["rope"] = (float(rope_theta) if rope_theta is not None else 1e4,
                       float(rope_scale) if rope_scale is not None else 1.0)
    return cfg


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    """BatchDecodeWithPagedKVCacheWrapper is FlashInfer's decode wrapper over
    attnc's decode kernel (CPU tensors or numpy arrays)."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, backend, jit_args)
        self._use_tensor_cores = bool(use_tensor_cores)  # a performance hint: same results

    @property
    def use_tensor_cores(self):
        return self._use_tensor_cores

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False,
             q_len_per_req=1, window_right=None, variant=None):
        """plan keeps the page table and compiles (first use) the variant for
        these arguments; variant=v uses a compiled attnc Variant instead."""
        _refuse("block_tables", block_tables, None, "the trtllm-gen backend's block tables")
        _refuse("seq_lens", seq_lens, None, "the trtllm-gen backend's sequence lengths")
        _refuse("q_len_per_req", q_len_per_req, 1, "multi-token decode (use the prefill wrapper)")
        if window_right not in (None, 0, -1):
            raise NotImplementedError("window_right=%r: a right window bound is served only by a GPU backend" % (window_right,))
        cfg = _common_cfg(num_qo_heads, num_kv_heads, head_dim, None, page_size, self._kv_layout, q_data_type,
                          kv_data_type, o_data_type, data_type, pos_encoding_mode, window_left, logits_soft_cap,
                          sm_scale, rope_scale, rope_theta)
        kv_indptr = _host_i32(indptr, "indptr")
        kv_indices = _host_i32(indices, "indices")
        last = _host_i32(last_page_len, "last_page_len")
        self._plan = self._setup(cfg, kv_indptr, kv_indices, last, None, variant, ["decode"], decode=True)
        self._plan["user_variant"] = variant is not None

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None):
        """run computes decode attention for the planned batch: o (and the
        base-2 lse with return_lse=True)."""
        return self._run(q, paged_kv_cache, args, q_scale, k_scale, v_scale, out, lse, return_lse, window_left, sinks)

    def forward(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None, v_scale=None,
                window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)

    def run_return_lse(self, q, paged_kv_cache, *args, **kw):
        kw["return_lse"] = True
        return self.run(q, paged_kv_cache, *args, **kw)


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    """BatchPrefillWithPagedKVCacheWrapper is FlashInfer's paged prefill
    wrapper over attnc's prefill kernel (CPU tensors or numpy arrays)."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, backend, jit_args)

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
             head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None, causal=False,
             pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None,
             token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None, seq_lens_q=None, block_tables=None,
             max_token_per_sequence=None, max_sequence_kv=None, fixed_split_size=None, disable_split_kv=False,
             variant=None):
        """plan keeps the page table (and packs custom_mask) and compiles
        (first use) the variant for these arguments; variant=v uses a
        compiled attnc Variant instead."""
        for name, val in (("prefix_len_ptr", prefix_len_ptr), ("token_pos_in_items_ptr", token_pos_in_items_ptr),
                          ("max_item_len_ptr", max_item_len_ptr)):
            _refuse(name, val, None, "multi-item scoring")
        _refuse("token_pos_in_items_len", token_pos_in_items_len, 0, "multi-item scoring")
        for name, val in (("seq_lens", seq_lens), ("seq_lens_q", seq_lens_q), ("block_tables", block_tables),
                          ("max_token_per_sequence", max_token_per_sequence), ("max_sequence_kv", max_sequence_kv)):
            _refuse(name, val, None, "an argument of the trtllm-gen/cudnn backends")
        if head_dim_vo is not None and head_dim_vo != head_dim_qk:
            raise NotImplementedError("head_dim_vo=%d != head_dim_qk=%d over a paged cache (attnc serves it for MLA specs)"
                                      % (head_dim_vo, head_dim_qk))
        # use_fp16_qk_reduction is a speed hint: attnc reduces in f32.
        cfg = _common_cfg(num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, page_size, self._kv_layout,
                          q_data_type, kv_data_type, o_data_type, None, pos_encoding_mode, window_left,
                          logits_soft_cap, sm_scale, rope_scale, rope_theta)
        qo = _host_i32(qo_indptr, "qo_indptr")
        kv_indptr = _host_i32(paged_kv_indptr, "paged_kv_indptr")
        kv_indices = _host_i32(paged_kv_indices, "paged_kv_indices")
        last = _host_i32(paged_kv_last_page_len, "paged_kv_last_page_len")
        has_mask = custom_mask is not None or packed_custom_mask is not None
        cfg["custom"] = has_mask
        cfg["causal"] = bool(causal) and not has_mask
        p = self._setup(cfg, kv_indptr, kv_indices, last, qo, variant, ["prefill"], decode=False)
        p["user_variant"] = variant is not None
        if has_mask:
            p["custom_mask"], p["mask_indptr"] = _pack_mask(custom_mask, packed_custom_mask, p)
        self._plan = p

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None):
        """run computes prefill attention for the planned batch: o (and the
        base-2 lse with return_lse=True)."""
        return self._run(q, paged_kv_cache, args, q_scale, k_scale, v_scale, out, lse, return_lse, window_left, sinks)

    def forward(self, q, paged_kv_cache, causal=True, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                rope_theta=None):
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale)

    def run_return_lse(self, q, paged_kv_cache, *args, **kw):
        kw["return_lse"] = True
        return self.run(q, paged_kv_cache, *args, **kw)


def _run_rows(p, v, queries, heads, dv, extra, out, lse, return_lse, lse_base="2"):
    """_run_rows runs a planned ragged or MLA kernel: queries is a list of
    (argument name, array [>= total_q, heads, d]); extra(table) gives the
    kernel's other arguments (K/V or pools, page tables) as pointers; lse is
    returned in lse_base. Rows the plan dropped get o = 0 and lse = -inf."""
    dt = p["cfg"]["dtype"]
    first = A.as_array(queries[0][1], queries[0][0])
    like_torch = A.is_torch(first)
    gpu = v.target == "cuda"
    device = None
    if gpu:
        if not A.is_cuda(first):
            raise ValueError("%s: the plan runs CUDA kernels (target cuda), which take torch CUDA tensors; got %s"
                             % (queries[0][0], A.describe(first)))
        device = first.device
    rows = p["total_q"]
    n = None
    qs = []
    for name, x in queries:
        x = A.as_array(x, name)
        d = x.shape[2] if len(x.shape) == 3 else None
        if not A.dtype_ok(x, dt):
            raise ValueError("%s: planned for %s, got %s" % (name, A.DTYPE_WORDS[dt], A.describe(x)))
        want_d = p["qdims"][name]
        if len(x.shape) != 3 or x.shape[1] != heads or d != want_d or x.shape[0] < rows or (n is not None and x.shape[0] != n):
            raise ValueError("%s: expected [%s, %d, %d], got %s"
                             % (name, ">= %d" % rows if n is None else str(n), heads, want_d, A.describe(x)))
        if gpu and (not A.is_cuda(x) or x.device != device):
            raise ValueError("%s: expected a CUDA tensor on %s, got %s" % (name, device, A.describe(x)))
        n = x.shape[0]
        qs.append((name, x))
    o_shape = (n, heads, dv)
    out, lse, want_lse = _outputs(out, lse, return_lse, o_shape, dt, like_torch, device, gpu)
    if want_lse and p.get("user_variant"):
        _check_lse_base(v, lse_base)
    keep = p["keep"]
    kept = rows if keep is None else len(keep)
    sel = []
    for name, x in qs:
        if keep is None:
            x = x[:rows] if n != rows else x
        else:
            x = x[keep] if not like_torch else x[_index(keep, device)]
        sel.append((name, x if A.is_contiguous(x) else A.contiguous(x)))
    direct = keep is None and n == rows
    ok = out if direct and A.is_contiguous(out) else A.empty((kept, heads, dv), dt, like_torch, device)
    lk = None
    if want_lse:
        lk = lse if direct and A.is_contiguous(lse) else A.empty((kept, heads), "f32", like_torch, device)
    dev = p.setdefault("device_tables", {})
    held = []  # device copies made for this call only

    def table(host, key):
        got = _table(host, device, dev, key)
        if device is None:
            return got
        held.append(got[1])
        return got[0]

    ka = {name: A.view(x, gpu)[0] for name, x in sel}
    ka.update({"qo_indptr": table(p["qo_indptr"], "qo_indptr"), "batch_size": p["batch"],
               "o": A.view(ok, gpu)[0], "lse": A.view(lk, gpu)[0] if lk is not None else None})
    ka.update(extra(table))
    if "q_rope_position" in p:
        ka["q_rope_position"] = table(p["q_rope_position"], "q_rope_position")
        ka["k_rope_pos_offset"] = table(p["k_rope_pos_offset"], "k_rope_pos_offset")
    if "custom_mask" in p:
        ka["custom_mask"] = table(p["custom_mask"], "custom_mask")
        ka["mask_indptr"] = table(p["mask_indptr"], "mask_indptr")
    _call_kernel(v, p["kernel"], ka, device)
    if ok is not out:
        _fill(out, 0)
        if keep is None:
            _assign(out, slice(0, rows), ok)
        else:
            _scatter(out, keep, ok, like_torch, device)
    if want_lse and lk is not lse:
        _fill(lse, -np.inf)
        if keep is None:
            _assign(lse, slice(0, rows), lk)
        else:
            _scatter(lse, keep, lk, like_torch, device)
    return (out, lse) if return_lse else out


class BatchPrefillWithRaggedKVCacheWrapper(_Wrapper):
    """BatchPrefillWithRaggedKVCacheWrapper is FlashInfer's prefill wrapper
    over K/V held contiguously (ragged by kv_indptr), served by attnc's
    prefill_ragged kernel. Keys of request b are k[kv_indptr[b]:kv_indptr[b+1]];
    its query i sits at kv_len - qo_len + i (FlashInfer's bottom-right causal
    alignment). HND k/v ([num_kv_heads, nnz_kv, d]) are copied to NHD rows,
    the only layout the kernel takes."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 kv_indptr_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None,
                 jit_kwargs=None):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, backend, jit_args)
        _refuse("jit_kwargs", jit_kwargs, None, "FlashInfer JIT variants are CUDA templates (write the variant as an "
                "attnc spec and pass plan(..., variant=v))")

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None, custom_mask=None,
             packed_custom_mask=None, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
             window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None,
             q_data_type="float16", kv_data_type=None, o_data_type=None, non_blocking=True, prefix_len_ptr=None,
             token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None, fixed_split_size=None,
             disable_split_kv=False, variant=None):
        """plan keeps the indptrs (and packs custom_mask) and compiles (first
        use) the prefill_ragged variant for these arguments; variant=v uses a
        compiled attnc Variant (with a prefill_ragged kernel) instead."""
        for name, val in (("prefix_len_ptr", prefix_len_ptr), ("token_pos_in_items_ptr", token_pos_in_items_ptr),
                          ("max_item_len_ptr", max_item_len_ptr)):
            _refuse(name, val, None, "multi-item scoring")
        _refuse("token_pos_in_items_len", token_pos_in_items_len, 0, "multi-item scoring")
        # use_fp16_qk_reduction, fixed_split_size, disable_split_kv: speed
        # hints (attnc reduces in f32).
        cfg = _common_cfg(num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, 16, "NHD", q_data_type, kv_data_type,
                          o_data_type, None, pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale,
                          rope_theta)
        cfg["kernels"] = "prefill_ragged"
        qo = _host_i32(qo_indptr, "qo_indptr")
        kv = _host_i32(kv_indptr, "kv_indptr")
        batch = len(qo) - 1
        if batch < 0:
            raise ValueError("qo_indptr: expected batch_size + 1 >= 1 entries, got none")
        if len(kv) != batch + 1:
            raise ValueError("kv_indptr: expected batch_size + 1 = %d entries (as qo_indptr), got %d" % (batch + 1, len(kv)))
        for name, ind in (("qo_indptr", qo), ("kv_indptr", kv)):
            if len(ind) and (ind[0] < 0 or (np.diff(ind.astype(np.int64)) < 0).any()):
                raise ValueError("%s: must start at or above 0 and never decrease" % name)
        if cfg["qo"] % max(cfg["kv"], 1) != 0:
            raise ValueError("num_qo_heads=%d must be a multiple of num_kv_heads=%d" % (cfg["qo"], cfg["kv"]))
        has_mask = custom_mask is not None or packed_custom_mask is not None
        cfg["custom"] = has_mask
        cfg["causal"] = bool(causal) and not has_mask
        p = {"cfg": cfg, "batch": batch, "kv_token_indptr": kv, "kernel": "prefill_ragged",
             "q_len": np.diff(qo.astype(np.int64)), "kv_len": np.diff(kv.astype(np.int64)),
             "user_variant": variant is not None}
        _place_rows(p, cfg, qo, False)  # refuses what the masks cannot place before compiling
        if variant is not None:
            c = dict(cfg)
            c["page_size"] = variant.constraints.get("page_size") if isinstance(variant, Variant) else None
            c["layout"] = variant.constraints.get("layout") if isinstance(variant, Variant) else None
            _check_variant(variant, c, ["prefill_ragged"])
            v = variant
        else:
            v = _variant(_spec(cfg), self._target)
        p["variant"] = v
        _rope_rows(p, cfg, v)
        _check_supplied(p, ["q", "qo_indptr", "k", "v", "kv_token_indptr"])
        if has_mask:
            p["custom_mask"], p["mask_indptr"] = _pack_mask(custom_mask, packed_custom_mask, p)
        p["qdims"] = {"q": cfg["dqk"]}
        self._plan = p

    begin_forward = plan

    def run(self, q, k, v, *args, out=None, lse=None, return_lse=False, enable_pdl=None):
        """run computes prefill attention of q over the ragged k, v: o (and
        the base-2 lse with return_lse=True)."""
        p = self._plan
        if p is None:
            raise RuntimeError("run() before plan()")
        if args:
            raise NotImplementedError("run(): extra positional arguments are FlashInfer JIT variant arguments; "
                                      "attnc's wrappers take none")
        cfg = p["cfg"]
        var = p["variant"]
        gpu = var.target == "cuda"
        qa = A.as_array(q, "q")
        if gpu and not A.is_cuda(qa):
            raise ValueError("q: the plan runs CUDA kernels (target cuda), which take torch CUDA tensors; got %s"
                             % A.describe(qa))
        device = qa.device if gpu else None
        total_kv = int(p["kv_token_indptr"][-1])
        kv_rows = {}
        for name, x, d in (("k", k, cfg["dqk"]), ("v", v, cfg["dv"])):
            x = A.as_array(x, name)
            if not A.dtype_ok(x, cfg["dtype"]):
                raise ValueError("%s: planned for %s, got %s" % (name, A.DTYPE_WORDS[cfg["dtype"]], A.describe(x)))
            if self._kv_layout == "NHD":
                ok = len(x.shape) == 3 and x.shape[1] == cfg["kv"] and x.shape[2] == d and x.shape[0] >= total_kv
                want = "[>= %d, %d, %d] (NHD)" % (total_kv, cfg["kv"], d)
            else:
                ok = len(x.shape) == 3 and x.shape[0] == cfg["kv"] and x.shape[2] == d and x.shape[1] >= total_kv
                want = "[%d, >= %d, %d] (HND)" % (cfg["kv"], total_kv, d)
            if not ok:
                raise ValueError("%s: expected %s, got %s" % (name, want, A.describe(x)))
            if gpu and (not A.is_cuda(x) or x.device != device):
                raise ValueError("%s: expected a CUDA tensor on %s (q's device), got %s" % (name, device, A.describe(x)))
            if self._kv_layout == "HND":
                x = x.transpose(0, 1) if A.is_torch(x) else x.transpose(1, 0, 2)
            kv_rows[name] = x if A.is_contiguous(x) else A.contiguous(x)

        def extra(table):
            return {"k": A.view(kv_rows["k"], gpu)[0], "v": A.view(kv_rows["v"], gpu)[0],
                    "kv_token_indptr": table(p["kv_token_indptr"], "kv_token_indptr")}

        return _run_rows(p, var, [("q", q)], cfg["qo"], cfg["dv"], extra, out, lse, return_lse)

    def forward(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, window_left=-1,
                logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        return self.run(q, k, v)

    def run_return_lse(self, q, k, v, *args, **kw):
        kw["return_lse"] = True
        return self.run(q, k, v, *args, **kw)

    def forward_return_lse(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                           window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        return self.run(q, k, v, return_lse=True)


def _mla_spec(cfg):
    """_mla_spec writes the attnc spec of an MLA plan (absorbed attention:
    q_nope·ckv + q_pe·kpe, o = weights·ckv)."""
    return ("variant %s {\n  mla(heads = %d, kv_lora_rank = %d, rope_dim = %d)\n  dtype %s\n"
            "  cache paged(page_size = %d)\n  mask %s\n  scale %s\n  lse base = %s\n  kernels prefill, decode\n}\n"
            % (_VARIANT_NAME, cfg["heads"], cfg["r"], cfg["dr"], cfg["dtype"], cfg["page_size"],
               "causal" if cfg["causal"] else "none", _num(cfg["scale"]), cfg["lse_base"]))


class BatchMLAPagedAttentionWrapper:
    """BatchMLAPagedAttentionWrapper is FlashInfer's MLA wrapper (DeepSeek's
    absorbed multi-head latent attention over a paged latent cache) served by
    attnc's mla variants: q_nope [total_q, heads, head_dim_ckv] and q_pe
    [total_q, heads, head_dim_kpe] against ckv_cache [pages, page_size,
    head_dim_ckv] and kpe_cache [pages, page_size, head_dim_kpe], o
    [total_q, heads, head_dim_ckv]; the kernels take the split q and the two
    pools as FlashInfer does (no concatenation). Decode (qo_len 1) and
    incremental prefill, causal aligned bottom-right."""

    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None, kv_indices=None,
                 kv_len_arr=None, backend="auto"):
        _refuse("use_cuda_graph", use_cuda_graph, False, "CUDA graphs are a GPU feature")
        if backend not in ("auto", "fa2"):
            raise NotImplementedError("backend=%r: a GPU backend (fa3, cutlass); attnc's kernels serve backend='auto'"
                                      % (backend,))
        self._float_workspace_buffer = float_workspace_buffer
        self._target = _target_of(float_workspace_buffer)
        self._plan = None

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size,
             causal, sm_scale, q_data_type, kv_data_type, use_profiler=False, variant=None):
        """plan keeps the page table (pages past each request's kv_len are
        dropped from it) and compiles (first use) the MLA variant for these
        arguments; variant=v uses a compiled attnc MLA Variant instead."""
        _refuse("use_profiler", use_profiler, False, "FlashInfer's intra-kernel profiler is a GPU feature")
        qd = _dtype(q_data_type, "q_data_type")
        kd = _dtype(kv_data_type, "kv_data_type") or qd
        if kd != qd:
            raise NotImplementedError("kv_data_type=%s with q_data_type=%s: attnc's MLA caches store q's type (fp8 "
                                      "latent caches: compile a spec with cache paged(kv_dtype = e4m3) and call "
                                      "variant.prefill(..., k_scale=...))" % (kv_data_type, q_data_type))
        if sm_scale is None:
            raise ValueError("sm_scale: required for MLA (1/sqrt of the head dim before absorption)")
        cfg = {"heads": int(num_heads), "r": int(head_dim_ckv), "dr": int(head_dim_kpe), "dtype": qd,
               "page_size": int(page_size), "causal": bool(causal), "scale": float(sm_scale), "lse_base": 2,
               "custom": False, "window": -1, "rope": None}
        ps = cfg["page_size"]
        if ps < 1:
            raise ValueError("page_size: must be positive, got %d" % ps)
        qo = _host_i32(qo_indptr, "qo_indptr")
        kvp = _host_i32(kv_indptr, "kv_indptr")
        ind = _host_i32(kv_indices, "kv_indices")
        kvl = _host_i32(kv_len_arr, "kv_len_arr").astype(np.int64)
        batch = len(qo) - 1
        if batch < 0:
            raise ValueError("qo_indptr: expected batch_size + 1 >= 1 entries, got none")
        if len(kvp) != batch + 1 or len(kvl) != batch:
            raise ValueError("kv_indptr, kv_len_arr: expected %d and %d entries (batch_size from qo_indptr), got %d "
                             "and %d" % (batch + 1, batch, len(kvp), len(kvl)))
        for name, x in (("qo_indptr", qo), ("kv_indptr", kvp)):
            if len(x) and (x[0] < 0 or (np.diff(x.astype(np.int64)) < 0).any()):
                raise ValueError("%s: must start at or above 0 and never decrease" % name)
        if len(kvp) and kvp[-1] > len(ind):
            raise ValueError("kv_indices: kv_indptr[-1] = %d, but kv_indices has %d entries" % (kvp[-1], len(ind)))
        if (kvl < 0).any():
            raise ValueError("kv_len_arr: lengths must be >= 0")
        need = (kvl + ps - 1) // ps
        have = np.diff(kvp.astype(np.int64))
        if (need > have).any():
            b = int(np.nonzero(need > have)[0][0])
            raise ValueError("kv_len_arr: request %d has kv_len %d, which needs %d pages of %d, but kv_indptr gives it %d"
                             % (b, kvl[b], need[b], ps, have[b]))
        # attnc's tables name exactly the pages kv_len covers: drop the rest.
        tbl = np.concatenate([ind[kvp[b]:kvp[b] + need[b]] for b in range(batch)] + [np.zeros(0, np.int32)])
        kv_indptr2 = np.concatenate([[0], np.cumsum(need)]).astype(np.int32)
        last = np.where(need > 0, kvl - (need - 1) * ps, 0).astype(np.int32)
        if variant is not None:
            v = variant
            _check_mla_variant(v, cfg)
        else:
            try:
                v = _variant(_mla_spec(cfg), self._target)
            except Exception as e:
                if "page_size" in str(e):
                    raise NotImplementedError("page_size=%d: %s" % (ps, e)) from e
                raise
        p = {"cfg": cfg, "variant": v, "batch": batch, "kv_indptr": kv_indptr2,
             "kv_indices": np.ascontiguousarray(tbl.astype(np.int32)), "last": last,
             "q_len": np.diff(qo.astype(np.int64)), "kv_len": kvl, "kernel": "prefill",
             "qdims": {"q_nope": cfg["r"], "q_pe": cfg["dr"]}, "user_variant": variant is not None}
        _place_rows(p, cfg, qo, False)
        if p["kernel"] not in v.kernels:
            raise NotImplementedError("variant %s has no prefill kernel, which this plan needs" % v.name)
        _check_supplied(p, ["q_nope", "q_pe", "qo_indptr", "ckv_pages", "kpe_pages", "num_pages", "kv_indptr",
                            "kv_indices", "kv_last_page_len"])
        self._plan = p

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, profiler_buffer=None,
            kv_len=None, page_table=None, return_lse_base_on_e=False):
        """run computes MLA attention for the planned batch: o [total_q,
        heads, head_dim_ckv] (and lse, base 2 unless return_lse_base_on_e)."""
        p = self._plan
        if p is None:
            raise RuntimeError("run() before plan()")
        _refuse("profiler_buffer", profiler_buffer, None, "FlashInfer's intra-kernel profiler is a GPU feature")
        _refuse("kv_len", kv_len, None, "an argument of the cutlass backend (the plan's kv_len_arr is used)")
        _refuse("page_table", page_table, None, "an argument of the cutlass backend (the plan's kv_indices are used)")
        cfg = p["cfg"]
        v = p["variant"]
        if return_lse_base_on_e and not p["user_variant"]:
            c2 = dict(cfg)
            c2["lse_base"] = "e"
            v = _variant(_mla_spec(c2), v.target)
        gpu = v.target == "cuda"
        first = A.as_array(q_nope, "q_nope")
        if gpu and not A.is_cuda(first):
            raise ValueError("q_nope: the plan runs CUDA kernels (target cuda), which take torch CUDA tensors; got %s"
                             % A.describe(first))
        device = first.device if gpu else None
        pools = {}
        for name, x, d in (("ckv_cache", ckv_cache, cfg["r"]), ("kpe_cache", kpe_cache, cfg["dr"])):
            x = A.as_array(x, name)
            if not A.dtype_ok(x, cfg["dtype"]):
                raise ValueError("%s: planned for %s, got %s" % (name, A.DTYPE_WORDS[cfg["dtype"]], A.describe(x)))
            if len(x.shape) != 3 or x.shape[1] != cfg["page_size"] or x.shape[2] != d:
                raise ValueError("%s: expected [num_pages, %d, %d], got %s" % (name, cfg["page_size"], d, A.describe(x)))
            if gpu and (not A.is_cuda(x) or x.device != device):
                raise ValueError("%s: expected a CUDA tensor on %s (q_nope's device), got %s" % (name, device, A.describe(x)))
            # The kernels read whole contiguous pages: a strided view (e.g.
            # the two halves of one [pages, page_size, ckv + kpe] buffer) is
            # copied.
            pools[name] = x if A.is_contiguous(x) else A.contiguous(x)
        pages = pools["ckv_cache"].shape[0]
        if pools["kpe_cache"].shape[0] != pages:
            raise ValueError("kpe_cache: %d pages, but ckv_cache has %d" % (pools["kpe_cache"].shape[0], pages))

        def extra(table):
            return {"ckv_pages": A.view(pools["ckv_cache"], gpu)[0], "kpe_pages": A.view(pools["kpe_cache"], gpu)[0],
                    "num_pages": pages, "kv_indptr": table(p["kv_indptr"], "kv_indptr"),
                    "kv_indices": table(p["kv_indices"], "kv_indices"), "kv_last_page_len": table(p["last"], "last")}

        return _run_rows(p, v, [("q_nope", q_nope), ("q_pe", q_pe)], cfg["heads"], cfg["r"], extra, out, lse, return_lse,
                         "e" if return_lse_base_on_e else "2")


def _check_mla_variant(v, cfg):
    """_check_mla_variant checks that a caller's MLA Variant agrees with the
    plan."""
    if not isinstance(v, Variant):
        raise ValueError("variant: expected an attnc.Variant (attnc.compile(spec)[name]), got %s" % type(v).__name__)
    c = v.constraints
    for key, want, what in (("qo_heads", cfg["heads"], "num_heads"), ("head_dim_qk", cfg["r"] + cfg["dr"],
                            "head_dim_ckv + head_dim_kpe"), ("head_dim_v", cfg["r"], "head_dim_ckv"),
                            ("page_size", cfg["page_size"], "page_size"), ("dtype", cfg["dtype"], "q_data_type")):
        if key in c and c[key] != want:
            raise ValueError("variant %s has %s = %r, but the plan's %s is %r" % (v.name, key, c[key], what, want))
    _check_scale(v, cfg["scale"])
    if "prefill" not in v.kernels or "ckv_pages" not in v.kernels["prefill"].arg_names:
        raise ValueError("variant %s is not an MLA variant with a prefill kernel (mla(...) and `kernels prefill`)" % v.name)
    _check_semantics(v, cfg)


def _pack_mask(custom_mask, packed, p):
    """_pack_mask packs FlashInfer's custom mask as its kernels read it: each
    request's q_len x kv_len bits row-major, little-endian bit order, padded
    to whole bytes; it returns the bytes for the kernel's (possibly
    compacted) rows and their byte offsets."""
    q_len, kv_len = p["q_len"], p["kv_len"]
    nbits = q_len * kv_len
    nbytes = (nbits + 7) // 8
    segs = []
    if packed is None:
        bits = A.to_numpy(A.as_array(custom_mask, "custom_mask")).reshape(-1).astype(bool)
        if bits.size < nbits.sum():
            raise ValueError("custom_mask: expected sum(qo_len * kv_len) = %d entries, got %d" % (nbits.sum(), bits.size))
        off = 0
        for b in range(p["batch"]):
            segs.append(np.packbits(bits[off:off + nbits[b]], bitorder="little"))
            off += nbits[b]
    else:
        raw = A.to_numpy(A.as_array(packed, "packed_custom_mask")).reshape(-1).view(np.uint8)
        if raw.size < nbytes.sum():
            raise ValueError("packed_custom_mask: expected %d bytes (each request's qo_len * kv_len bits padded to "
                             "whole bytes), got %d" % (nbytes.sum(), raw.size))
        off = 0
        for b in range(p["batch"]):
            segs.append(raw[off:off + nbytes[b]])
            off += nbytes[b]
    kept = p["kept_q_len"]
    out = []
    for b in range(p["batch"]):
        if kept[b] == q_len[b]:
            out.append(segs[b])
        else:  # only whole requests with kv_len == 0 are dropped here: no bits
            out.append(np.zeros(0, np.uint8))
    lens = np.array([len(s) for s in out], np.int64)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    data = np.concatenate(out + [np.zeros(1, np.uint8)]).astype(np.uint8)
    return np.ascontiguousarray(data), indptr


# merge_state and append: one compiled variant per shape.

def _merge_variant(dtype, heads, d, target="cpu"):
    spec = ("variant %s {\n  heads qo = %d, kv = 1\n  head_dim %d\n  dtype %s\n  cache paged(page_size = 16)\n"
            "  mask causal\n  lse base = 2\n  kernels merge_state\n}\n" % (_VARIANT_NAME, heads, d, dtype))
    return _variant(spec, target)


def _merge_args(v, s, name_v, name_s):
    v = A.as_array(v, name_v)
    s = A.as_array(s, name_s)
    dt = A.attnc_dtype_of(v)
    if dt not in ("f16", "bf16", "f32") or len(v.shape) != 3:
        raise ValueError("%s: expected a [seq_len, num_heads, head_dim] float16/bfloat16/float32 tensor, got %s"
                         % (name_v, A.describe(v)))
    if not A.dtype_ok(s, "f32") or tuple(s.shape) != tuple(v.shape[:2]):
        raise ValueError("%s: expected float32 %s, got %s" % (name_s, list(v.shape[:2]), A.describe(s)))
    return v, s, dt


def merge_state(v_a, s_a, v_b, s_b):
    """merge_state merges two attention states (v, base-2 lse) and returns
    the merged (v, s)."""
    v_a, s_a, dt = _merge_args(v_a, s_a, "v_a", "s_a")
    v_b, s_b, _ = _merge_args(v_b, s_b, "v_b", "s_b")
    if tuple(v_b.shape) != tuple(v_a.shape) or A.attnc_dtype_of(v_b) != dt:
        raise ValueError("v_b: expected %s like v_a, got %s" % (list(v_a.shape), A.describe(v_b)))
    var = _merge_variant(dt, v_a.shape[1], v_a.shape[2], _target_of(v_a))
    v = A.contiguous(v_a).clone() if A.is_torch(v_a) else np.array(v_a, copy=True, order="C")
    s = A.contiguous(s_a).clone() if A.is_torch(s_a) else np.array(s_a, copy=True, order="C")
    var.merge_state(v=v, s=s, v_other=v_b, s_other=s_b)
    return v, s


def merge_state_in_place(v, s, v_other, s_other, mask=None):
    """merge_state_in_place merges (v_other, s_other) into (v, s) in place;
    with mask (bool [seq_len]) only the rows where it is true."""
    v, s, dt = _merge_args(v, s, "v", "s")
    v_other, s_other, _ = _merge_args(v_other, s_other, "v_other", "s_other")
    if tuple(v_other.shape) != tuple(v.shape) or A.attnc_dtype_of(v_other) != dt:
        raise ValueError("v_other: expected %s like v, got %s" % (list(v.shape), A.describe(v_other)))
    var = _merge_variant(dt, v.shape[1], v.shape[2], _target_of(v))
    if mask is None:
        var.merge_state(v=v, s=s, v_other=v_other, s_other=s_other)
        return
    m = A.to_numpy(A.as_array(mask, "mask")).astype(bool).reshape(-1)
    if m.size != v.shape[0]:
        raise ValueError("mask: expected %d entries, got %d" % (v.shape[0], m.size))
    rows = np.nonzero(m)[0]
    if A.is_torch(v):
        rows = _index(rows, v.device if A.is_cuda(v) else None)
    vv, ss = A.contiguous(v[rows]), A.contiguous(s[rows])
    var.merge_state(v=vv, s=ss, v_other=A.contiguous(v_other[rows]), s_other=A.contiguous(s_other[rows]))
    v[rows] = vv
    s[rows] = ss


def _append_variant(dtype, kv_heads, d, page_size, layout, target="cpu"):
    spec = ("variant %s {\n  heads qo = %d, kv = %d\n  head_dim %d\n  dtype %s\n"
            "  cache paged(page_size = %d, layout = %s)\n  mask causal\n  lse base = 2\n  kernels append\n}\n"
            % (_VARIANT_NAME, kv_heads, kv_heads, d, dtype, page_size, layout))
    return _variant(spec, target)


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices, kv_indptr,
                          kv_last_page_len, kv_layout="NHD"):
    """append_paged_kv_cache writes append_key/append_value (nnz rows) into
    the paged cache: row i goes to request batch_indices[i] at position
    positions[i], through attnc's append kernel."""
    if kv_layout not in ("NHD", "HND"):
        raise KeyError("Invalid kv_layout %s" % kv_layout)
    k_cache, v_cache = _unpack_cache(paged_kv_cache)
    append_key = A.as_array(append_key, "append_key")
    append_value = A.as_array(append_value, "append_value")
    dt = A.attnc_dtype_of(append_key)
    if dt not in ("f16", "bf16", "f32") or len(append_key.shape) != 3:
        raise ValueError("append_key: expected a [nnz, num_kv_heads, head_dim] float tensor, got %s" % A.describe(append_key))
    nnz, heads, d = append_key.shape
    kc = A.as_array(k_cache, "paged_kv_cache")
    if len(kc.shape) != 4:
        raise ValueError("paged_kv_cache: expected 4-D k and v caches, got %s" % A.describe(kc))
    ps = kc.shape[1] if kv_layout == "NHD" else kc.shape[2]
    target = _target_of(append_key)
    device = append_key.device if target == "cuda" else None
    pg = _pages(k_cache, v_cache, dt, _page_shape(kv_layout, ps, heads, d), device=device)
    bi = _host_i32(batch_indices, "batch_indices").astype(np.int64)
    pos = _host_i32(positions, "positions").astype(np.int64)
    ind = _host_i32(kv_indices, "kv_indices").astype(np.int64)
    ptr = _host_i32(kv_indptr, "kv_indptr").astype(np.int64)
    if bi.size != nnz or pos.size != nnz:
        raise ValueError("batch_indices, positions: expected %d entries (append_key's rows), got %d and %d"
                         % (nnz, bi.size, pos.size))
    if nnz and (bi.min() < 0 or bi.max() >= len(ptr) - 1):
        raise ValueError("batch_indices: entries must be in 0..%d" % (len(ptr) - 2))
    if nnz and pos.min() < 0:
        raise ValueError("positions: entries must be >= 0")
    page_slot = ptr[bi] + pos // ps if nnz else np.zeros(0, np.int64)
    if nnz and (page_slot >= ptr[bi + 1]).any():
        i = int(np.nonzero(page_slot >= ptr[bi + 1])[0][0])
        raise ValueError("positions: row %d (position %d of request %d) lies past that request's pages" % (i, pos[i], bi[i]))
    page = ind[page_slot] if nnz else np.zeros(0, np.int64)
    if nnz and ((page < 0) | (page >= pg.pages)).any():
        raise ValueError("kv_indices: a page id the appended rows use is outside 0..%d" % (pg.pages - 1))
    pmap = np.ascontiguousarray((page * pg.m * ps + pos % ps).astype(np.int32))
    var = _append_variant(dt, heads, d, ps, kv_layout, target)
    kern = var.kernels["append"]
    kk = A.contiguous(append_key)
    vv = A.contiguous(append_value)
    if A.attnc_dtype_of(vv) != dt or tuple(vv.shape) != tuple(kk.shape):
        raise ValueError("append_value: expected %s like append_key, got %s" % (list(kk.shape), A.describe(vv)))
    if device is not None and (not A.is_cuda(vv) or vv.device != device):
        raise ValueError("append_value: expected a CUDA tensor on %s like append_key, got %s" % (device, A.describe(vv)))
    pm = _table(pmap, device)
    ka = {"k": A.view(kk, device is not None)[0], "v": A.view(vv, device is not None)[0],
          "position_map": pm if device is None else pm[0], "n": nnz,
          "k_pages": pg.kp, "v_pages": pg.vp, "num_pages": pg.num_pages}
    if var.target != "cpu":
        ka["stream"] = _launch_stream(kern, device)
    st = kern._fn(*[ka[a.name] for a in kern.args])
    if st != 0:
        raise var._error(st, "append")
    for src, dst in ((pg.k, k_cache), (pg.v, v_cache)):
        if src is not dst and not _same_storage(src, dst):
            dst[...] = src  # a contiguous copy was written: copy it back


def _same_storage(a, b):
    return A.view(a, True)[0] == A.view(A.as_array(b, "paged_kv_cache"), True)[0]


def get_seq_lens(kv_indptr, kv_last_page_len, page_size):
    """get_seq_lens is FlashInfer's kv length per request:
    clamp(pages - 1, 0) * page_size + last_page_len."""
    like_torch = A.is_torch(kv_indptr)
    ind = A.to_numpy(kv_indptr)
    last = A.to_numpy(kv_last_page_len)
    dt = np.result_type(ind.dtype, last.dtype)  # as FlashInfer's tensor arithmetic gives
    out = (np.maximum(ind[1:].astype(np.int64) - ind[:-1] - 1, 0) * int(page_size) + last).astype(dt)
    if like_torch:
        return A.torch_module().from_numpy(out)
    return out


def get_batch_indices_positions(append_indptr, seq_lens, nnz):
    """get_batch_indices_positions gives, for each of the nnz appended rows,
    its request and its position (seq_lens are the lengths after the
    append)."""
    like_torch = A.is_torch(append_indptr)
    ind = A.to_numpy(append_indptr).astype(np.int64)
    sl = A.to_numpy(seq_lens).astype(np.int64)
    nnz = int(nnz)
    bi = np.zeros(nnz, np.int32)
    pos = np.zeros(nnz, np.int32)
    for b in range(len(ind) - 1):
        lo, hi = int(ind[b]), min(int(ind[b + 1]), nnz)
        if hi > lo:
            bi[lo:hi] = b
            pos[lo:hi] = sl[b] - (ind[b + 1] - ind[b]) + np.arange(hi - lo)
    if like_torch:
        torch = A.torch_module()
        return torch.from_numpy(bi), torch.from_numpy(pos)
    return bi, pos


def merge_states(v, s):
    """merge_states merges num_states attention states per row: v
    [seq_len, num_states, num_heads, head_dim], s [seq_len, num_states,
    num_heads] (base-2 lse); it returns the merged (v, s)."""
    v = A.as_array(v, "v")
    s = A.as_array(s, "s")
    if len(v.shape) != 4 or tuple(s.shape) != tuple(v.shape[:3]):
        raise ValueError("v, s: expected [seq_len, num_states, num_heads, head_dim] and [seq_len, num_states, num_heads], "
                         "got %s and %s" % (A.describe(v), A.describe(s)))
    if v.shape[1] == 0:
        raise ValueError("v: num_states must be at least 1")
    if A.is_torch(v):
        out_v, out_s = v[:, 0].contiguous().clone(), s[:, 0].contiguous().clone()
    else:
        out_v, out_s = np.array(v[:, 0], order="C"), np.array(s[:, 0], order="C")
    for i in range(1, v.shape[1]):
        merge_state_in_place(out_v, out_s, A.contiguous(v[:, i]), A.contiguous(s[:, i]))
    return out_v, out_s


def _single(q, k, v, kv_layout, prefill_kw, run_kw, decode):
    """_single runs one request's contiguous K/V as a paged cache of
    page_size 1 (NHD rows are pages of one slot: no copy)."""
    k = A.as_array(k, "k")
    v = A.as_array(v, "v")
    if kv_layout not in ("NHD", "HND"):
        raise KeyError("Invalid kv_layout %s" % kv_layout)
    if len(k.shape) != 3 or tuple(v.shape) != tuple(k.shape):
        raise ValueError("k, v: expected two [kv_len, num_kv_heads, head_dim] (NHD) or [num_kv_heads, kv_len, head_dim] "
                         "(HND) tensors, got %s and %s" % (A.describe(k), A.describe(v)))
    if kv_layout == "HND":
        k, v = k.transpose(0, 1) if A.is_torch(k) else k.transpose(1, 0, 2), \
            v.transpose(0, 1) if A.is_torch(v) else v.transpose(1, 0, 2)
    k, v = A.contiguous(k), A.contiguous(v)
    kv_len, hk, d = k.shape
    pk = k.reshape(kv_len, 1, hk, d) if not A.is_torch(k) else k.view(kv_len, 1, hk, d)
    pv = v.reshape(kv_len, 1, hk, d) if not A.is_torch(v) else v.view(kv_len, 1, hk, d)
    q = A.as_array(q, "q")
    dt = A.attnc_dtype_of(q)
    qdt = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}.get(dt)
    if qdt is None:
        raise ValueError("q: expected float16, bfloat16 or float32, got %s" % A.describe(q))
    indptr = np.array([0, kv_len], np.int32)
    indices = np.arange(kv_len, dtype=np.int32)
    last = np.array([1 if kv_len else 0], np.int32)
    if decode:
        w = BatchDecodeWithPagedKVCacheWrapper(q if A.is_cuda(q) else None, "NHD")
        w.plan(indptr, indices, last, q.shape[0], hk, d, 1, q_data_type=qdt, **prefill_kw)
        qq = q.reshape(1, *q.shape) if not A.is_torch(q) else q.unsqueeze(0)
    else:
        w = BatchPrefillWithPagedKVCacheWrapper(q if A.is_cuda(q) else None, "NHD")
        w.plan(np.array([0, q.shape[0]], np.int32), indptr, indices, last, q.shape[1], hk, d, 1, q_data_type=qdt,
               **prefill_kw)
        qq = q
    got = w.run(qq, (pk, pv), **run_kw)
    if decode:
        if run_kw.get("return_lse"):
            return got[0][0], got[1][0]
        return got[0]
    return got


def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                q_scale=None, k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None,
                                sm_scale=None, rope_scale=None, rope_theta=None, return_lse=False):
    """single_decode_with_kv_cache is decode attention for one request: q
    [num_qo_heads, head_dim] over k, v [kv_len, num_kv_heads, head_dim]."""
    return _single(q, k, v, kv_layout,
                   dict(pos_encoding_mode=pos_encoding_mode, window_left=window_left, logits_soft_cap=logits_soft_cap,
                        sm_scale=sm_scale, rope_scale=rope_scale, rope_theta=rope_theta),
                   dict(q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, return_lse=return_lse), decode=True)


def single_prefill_with_kv_cache(q, k, v, custom_mask=None, packed_custom_mask=None, causal=False, kv_layout="NHD",
                                 pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
                                 logits_soft_cap=None, rope_scale=None, rope_theta=None, return_lse=False):
    """single_prefill_with_kv_cache is prefill attention for one request: q
    [qo_len, num_qo_heads, head_dim] over k, v [kv_len, num_kv_heads,
    head_dim]."""
    return _single(q, k, v, kv_layout,
                   dict(custom_mask=custom_mask, packed_custom_mask=packed_custom_mask, causal=causal,
                        pos_encoding_mode=pos_encoding_mode, sm_scale=sm_scale, window_left=window_left,
                        logits_soft_cap=logits_soft_cap, rope_scale=rope_scale, rope_theta=rope_theta),
                   dict(return_lse=return_lse), decode=False)
