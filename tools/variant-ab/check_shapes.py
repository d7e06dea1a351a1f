"""Correctness check of one variant build (on PYTHONPATH) before it is timed:
flashcore's dispatch against a float64 reference on fresh random inputs,
output poisoned with NaN first, over odd lengths, masks, GQA and both dtypes
of one head dim. Prints one line per shape and exits 1 on any failure (bf16
rel err >= 1e-2, fp16 >= 2e-3, LSE >= 1e-3: the GPU tests' bounds).

  python check_shapes.py HEAD_DIM
"""
import math
import sys

import torch

import flashcore


def reference(q, k, v, scale, causal, window):
    """float64 attention and natural-log LSE, bottom-right aligned masks."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    sq, sk = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    allowed = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        allowed &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            allowed &= j >= i - left
        if right >= 0:
            allowed &= j <= i + right
    s = s.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhqk,bhkd->bhqd", p, v), lse


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
    ]
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    bad = 0
    for dt, B, Hq, Hkv, Sq, Sk, causal, window in shapes:
        q = torch.randn(B, Hq, Sq, d, device="cuda", dtype=dtypes[dt])
        k = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=dtypes[dt])
        v = torch.randn(B, Hkv, Sk, d, device="cuda", dtype=dtypes[dt])
        out = torch.full_like(q, float("nan"))
        kw = {"window": window} if window is not None else {}
        o, lse = flashcore.attention(q, k, v, causal=causal, out=out, return_lse=True, **kw)
        torch.cuda.synchronize()
        ref, ref_lse = reference(q, k, v, 1.0 / math.sqrt(d), causal, window)
        err = ((o.double() - ref).norm() / ref.norm()).item()
        finite = ref_lse.isfinite()
        lse_err = ((lse.double().reshape(ref_lse.shape)[finite] - ref_lse[finite]).abs() /
                   ref_lse[finite].abs().clamp_min(1.0)).max().item()
        ok = err < (1e-2 if dt == "bf16" else 2e-3) and lse_err < 1e-3 and bool(o.isfinite().all())
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {dt} B{B} H{Hq}/{Hkv} S{Sq}x{Sk} d{d} causal={causal} window={window}: "
              f"rel err {err:.2e}, lse err {lse_err:.1e}", flush=True)
    print(f"check_shapes: {len(shapes) - bad}/{len(shapes)} ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
