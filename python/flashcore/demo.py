"""A tiny self-check of flashcore on the CPU reference backend.

    python -m flashcore.demo [--batch 1 --heads 4 --seqlen 256 --head-dim 64 --dtype float16]

Runs flashcore.attention on random host arrays, times it, and compares the
result with a float64 NumPy computation of the same attention. It is the
fallback that scripts/setup-and-bench runs when the benchmark package
(flashcore.bench) is not available. It prints no performance claims, only
what it measured on this machine.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import flashcore


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def reference_attention(q, k, v, *, causal=False, scale=None):
    """float64 softmax(q k^T scale) v for (B, H, S, D) arrays, bottom-right
    aligned causal mask, GQA by repeating KV heads."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    sq, sk = q.shape[2], k.shape[2]
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / np.sqrt(q.shape[3]) if scale is None else scale)
    if causal:
        rows = np.arange(sq)[:, None] + (sk - sq)
        s = np.where(np.arange(sk)[None, :] <= rows, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    denom = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, denom, out=np.zeros_like(p), where=denom > 0)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashcore.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    shape = (args.batch, args.heads, args.seqlen, args.head_dim)
    dt = _numpy_dtype(args.dtype)
    q, k, v = (rng.standard_normal(shape).astype(dt) for _ in range(3))

    print(
        f"flashcore {flashcore.__version__} (CUDA backend built: {flashcore.built_with_cuda()}); "
        f"CPU reference demo: B={args.batch} H={args.heads} S={args.seqlen} "
        f"D={args.head_dim} {args.dtype} causal={args.causal}"
    )
    out = flashcore.attention(q, k, v, causal=args.causal)  # warm-up
    times = []
    for _ in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        out = flashcore.attention(q, k, v, causal=args.causal)
        times.append(time.perf_counter() - t0)

    ref = reference_attention(q, k, v, causal=args.causal)
    got = out.astype(np.float64)
    max_err = float(np.max(np.abs(got - ref)))
    rel_err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
    tol = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 6e-2}[args.dtype]
    ok = np.isfinite(got).all() and max_err <= tol
    print(
        f"CPU reference: best {min(times) * 1e3:.2f} ms over {len(times)} runs; "
        f"vs float64 NumPy: max abs err {max_err:.3e}, rel L2 err {rel_err:.3e} "
        f"({'OK' if ok else 'FAIL'}, tolerance {tol:g})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
