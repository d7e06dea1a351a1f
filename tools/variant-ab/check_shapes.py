"""Correctness check of one variant build (on PYTHONPATH) before it is timed:
flashcore's dispatch against a float64 reference on fresh random inputs,
output poisoned with NaN first, over odd lengths, masks, GQA and both dtypes
of one head dim. Prints one line per shape and exits 1 on any failure (bf16
rel err >= 1e-2, fp16 >= 2e-3, LSE >= 1e-3: the GPU tests' bounds).

  python check_shapes.py HEAD_DIM
  BLOCK_M=192 python check_shapes.py 128   # every call with that tile override
                                           # (a call the override cannot take is
                                           # reported as refused, not as a failure);
                                           # BLOCK_N likewise (a key block other
                                           # than dispatch's changes the bits)
  FINGERPRINT=1 python check_shapes.py 64  # one hash of out and LSE a shape, no
                                           # reference: diff two builds' lines to
                                           # show a change keeps the bits

Head dims up to 128 also run variable-length (packed) batches, which take the
serving kernels: build those too (`SERVING=1 tools/variant-ab/run ...`).
"""
import hashlib
import math
import os
import pathlib
import sys

import numpy as np
import torch

import flashcore

# The tests' float64 NumPy reference (full softmax, no tiling).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from reference import attention_ref, attention_varlen_ref  # noqa: E402


def main():
    d = int(sys.argv[1])
    torch.manual_seed(1)
    # (dtype, B, Hq, Hkv, Sq, Sk, causal, window)
    shapes = [
        ("bf16", 2, 4, 4, 1, 1, False, None),
        ("bf16", 3, 8, 2, 1, 700, False, None),  # decode: GQA rows packed into one tile
        ("bf16", 1, 4, 2, 17, 17, True, None),
        ("bf16", 2, 2, 2, 127, 129, False, None),
        ("bf16", 1, 4, 1, 129, 1000, True, None),
        ("fp16", 1, 2, 2, 1000, 1000, False, None),
        ("fp16", 1, 2, 2, 1000, 1000, True, None),
        ("bf16", 1, 2, 2, 4097, 4097, False, None),
        ("bf16", 1, 2, 2, 4097, 4097, True, None),
        ("bf16", 1, 2, 2, 2048, 2048, False, (300, 40)),
        ("fp16", 3, 2, 2, 256, 640, False, (100, -1)),
        ("bf16", 2, 8, 8, 512, 512, True, None),
        # few keys, an even number of query blocks a head and no mask: K/V
        # multicast pairs whose last key block is mostly (or a TMA half
        # wholly) past the keys' end
        ("bf16", 1, 2, 2, 256, 20, False, None),
        ("fp16", 2, 2, 2, 512, 160, False, None),
    ]
    if d == 64:
        # Calls that take a tail plan (tail_plan.h) in head dim 64's 192-row
        # kernel on a 132-SM card (two rounds of pairs or more: B4, not B2):
        # an odd number of query blocks (11), more queries than keys, a
        # window. Dispatch gives them 128-row tiles (fewer than 8 tiles an
        # SM): run with BLOCK_M=192 to take the plan.
        shapes += [
            ("bf16", 4, 16, 16, 2049, 2049, True, None),
            ("fp16", 4, 16, 8, 2300, 1900, True, None),
            ("bf16", 4, 16, 16, 2048, 2048, False, (700, 0)),
        ]
    # Variable-length batches (serving kernels, head dims up to 128):
    # (dtype, Hq, Hkv, query lengths, key lengths, causal, window)
    varlen = [
        ("bf16", 4, 2, (100, 257, 543), (100, 257, 543), True, None),
        ("fp16", 2, 2, (33, 350, 700), (150, 350, 1000), True, None),
        ("bf16", 2, 1, (129, 64, 300), (1000, 64, 301), False, (-1, 20)),
    ] if d <= 128 else []
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    fingerprint = os.environ.get("FINGERPRINT") == "1"
    bad = 0
    cases = [("plain", *sh) for sh in shapes] + [("varlen", *sh) for sh in varlen]
    for kind, dt, *rest in cases:
        if kind == "plain":
            B, Hq, Hkv, Sq, Sk, causal, window = rest
            q_shape, kv_shape = (B, Hq, Sq, d), (B, Hkv, Sk, d)
        else:
            Hq, Hkv, lens_q, lens_k, causal, window = rest
            B, Sq, Sk = len(lens_q), max(lens_q), max(lens_k)
            q_shape, kv_shape = (sum(lens_q), Hq, d), (sum(lens_k), Hkv, d)
        q, k, v = (torch.randn(s, device="cuda", dtype=dtypes[dt]) for s in (q_shape, kv_shape, kv_shape))
        out = torch.full_like(q, float("nan"))
        kw = {"window": window} if window is not None else {}
        for var in ("BLOCK_M", "BLOCK_N"):
            if os.environ.get(var):
                kw[var.lower()] = int(os.environ[var])
        what = f"{kind} {dt} B{B} H{Hq}/{Hkv} S{Sq}x{Sk} d{d} causal={causal} window={window}"
        try:
            if kind == "plain":
                o, lse = flashcore.attention(q, k, v, causal=causal, out=out, return_lse=True, **kw)
            else:
                cu_q, cu_k = (torch.tensor([0, *np.cumsum(lens)], device="cuda", dtype=torch.int32)
                              for lens in (lens_q, lens_k))
                o, lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, Sq, Sk, causal=causal, out=out,
                                                    return_lse=True, **kw)
        except (ValueError, TypeError, RuntimeError) as e:
            if kind == "varlen" and "no sm90 kernel compiled" in str(e):
                print(f"skipped {what}: this build has no serving kernels (SERVING=1 tools/variant-ab/run)")
                continue
            if "block_m" not in kw and "block_n" not in kw:
                raise
            print(f"refused {what}: {e}")
            continue
        torch.cuda.synchronize()
        if fingerprint:
            h = hashlib.sha1(o.cpu().view(torch.int16).numpy().tobytes() + lse.cpu().numpy().tobytes())
            print(f"{what}: {h.hexdigest()[:16]}", flush=True)
            continue
        if kind == "plain":
            ref, ref_lse = attention_ref(*(t.float().cpu().numpy() for t in (q, k, v)), causal=causal,
                                         scale=1.0 / math.sqrt(d), window=window)
        else:
            ref, ref_lse = attention_varlen_ref(*(t.float().cpu().numpy() for t in (q, k, v)), cu_q.cpu(),
                                                cu_k.cpu(), causal=causal, scale=1.0 / math.sqrt(d), window=window)
        got = o.double().cpu().numpy()
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        finite = np.isfinite(ref_lse)
        got_lse = lse.double().cpu().numpy().reshape(ref_lse.shape)
        lse_err = float((np.abs(got_lse[finite] - ref_lse[finite]) / np.maximum(np.abs(ref_lse[finite]), 1.0)).max())
        ok = err < (1e-2 if dt == "bf16" else 2e-3) and lse_err < 1e-3 and bool(np.isfinite(got).all())
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {what}: rel err {err:.2e}, lse err {lse_err:.1e}", flush=True)
    if not fingerprint:
        print(f"check_shapes: {len(cases) - bad}/{len(cases)} ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
