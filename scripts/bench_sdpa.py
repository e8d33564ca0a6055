#!/usr/bin/env python3
"""Time torch.nn.functional.scaled_dot_product_attention on one prefill shape.

scripts/gpu-check.sh runs it with the shape `attnc bench --gpu` measured and
prints the ratio of the two TFLOP/s. FLOPs are counted as attnc bench counts
them: 2*batch*q*kv*heads*(d_qk + d_v), halved when causal. GQA is served by
repeating K and V over the query heads before timing (same FLOPs, works on
every torch version). Prints one line:

  sdpa torch=<version> dtype=<f16|bf16|f32> batch=.. q_len=.. kv_len=.. heads=.. causal=.. ms=.. tflops=..

Exit status 2 without torch or a CUDA device.
"""
import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--q-len", type=int, default=1024)
    ap.add_argument("--kv-len", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=32, help="query heads")
    ap.add_argument("--kv-heads", type=int, default=0, help="kv heads (default: --heads)")
    ap.add_argument("--head-dim", type=int, default=128, help="d_qk")
    ap.add_argument("--head-dim-v", type=int, default=0, help="d_v (default: --head-dim)")
    ap.add_argument("--dtype", choices=["f16", "bf16", "f32"], default="f16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=1.0, help="least timed wall time")
    a = ap.parse_args()
    kv_heads = a.kv_heads or a.heads
    d_v = a.head_dim_v or a.head_dim
    if a.heads % kv_heads:
        print(f"bench_sdpa: --heads {a.heads} is not a multiple of --kv-heads {kv_heads}", file=sys.stderr)
        return 1
    if a.causal and a.q_len != a.kv_len:
        # torch's is_causal aligns the mask to the top left; attnc's causal
        # mask is aligned to the end of the cache. They agree when q == kv.
        print("bench_sdpa: --causal needs --q-len == --kv-len", file=sys.stderr)
        return 1
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_sdpa: torch is not available: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_sdpa: torch sees no CUDA device", file=sys.stderr)
        return 2
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.rand(a.batch, a.heads, a.q_len, a.head_dim, device=dev, dtype=dt, generator=g) * 2 - 1
    k = torch.rand(a.batch, kv_heads, a.kv_len, a.head_dim, device=dev, dtype=dt, generator=g) * 2 - 1
    v = torch.rand(a.batch, kv_heads, a.kv_len, d_v, device=dev, dtype=dt, generator=g) * 2 - 1
    if kv_heads != a.heads:
        k = k.repeat_interleave(a.heads // kv_heads, dim=1).contiguous()
        v = v.repeat_interleave(a.heads // kv_heads, dim=1).contiguous()

    def call():
        return F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)

    with torch.inference_mode():
        out = call()  # warm-up (kernel selection, caches)
        torch.cuda.synchronize()
        if not torch.isfinite(out).all():
            print("bench_sdpa: non-finite output", file=sys.stderr)
            return 1
        calls, secs, group = 0, 0.0, 1
        while secs < a.seconds or calls < 2:
            t0 = time.perf_counter()
            for _ in range(group):
                call()
            torch.cuda.synchronize()
            secs += time.perf_counter() - t0
            calls += group
            group = min(2 * group, 1024)
    flops = 2.0 * a.batch * a.q_len * a.kv_len * a.heads * (a.head_dim + d_v)
    if a.causal:
        flops /= 2
    per_call = secs / calls
    print(
        f"sdpa torch={torch.__version__} dtype={a.dtype} batch={a.batch} q_len={a.q_len} kv_len={a.kv_len} "
        f"heads={a.heads} causal={str(a.causal).lower()} calls={calls} ms={1e3 * per_call:.4g} "
        f"tflops={flops / per_call / 1e12:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
