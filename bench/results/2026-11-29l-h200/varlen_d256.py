#!/usr/bin/env python3
"""Head dim 256 prefill through the serving kernel (2026-11-29l).

Uniform batches (B sequences of S tokens, 16 query heads over 8 KV heads,
bf16, causal and not), timed on the same tensors in one process:
 - varlen: flashcore.attention_varlen, the new serving kernel (64-key
   blocks at every length; O stored from registers, as varlen queries need);
 - kvcache (--kvcache): the same kernel through
   flashcore.attention_with_kvcache, the same data as a full cache (O
   through TMA: the direct store's cost apart);
 - plain-n64: flashcore.attention on the BSHD view with block_n=64 (the
   plain 64-key kernel: the same bits);
 - plain: flashcore.attention with dispatch's own tile (80 keys from 2k
   tokens, 4k causal);
 - sdpa-cudnn: SDPA's cuDNN backend on a BHSD copy.
Every output is checked against cuDNN first; the serving outputs must equal
the plain block_n=64 output bit for bit. Graph-mode medians
(flashcore.bench.timing.time_graph), as in the benchmark.

    PYTHONPATH=build-gpu/python python3 varlen_d256.py [--csv out.csv] [--kvcache]
"""
import argparse
import csv
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default=None)
    ap.add_argument("--shapes", default="8x512,4x1024,2x2048,1x4096,1x8192")
    ap.add_argument("--kvcache", action="store_true", help="also time the KV-cache entry on the same data")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashcore
    from flashcore.bench.timing import time_graph

    hq, hkv, d = 16, 8, 256
    rows = []
    for spec in args.shapes.split(","):
        b, s = (int(x) for x in spec.split("x"))
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(b * 7919 + s + causal)
            q = torch.randn(b * s, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
            k = torch.randn(b * s, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
            v = torch.randn(b * s, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
            cu = torch.arange(0, (b + 1) * s, s, device="cuda", dtype=torch.int32)
            q4, k4, v4 = (t.view(b, s, -1, d) for t in (q, k, v))  # BSHD views, no copies
            qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q4, k4, v4))  # BHSD copies for SDPA
            out = torch.empty_like(q)
            out4 = out.view(b, s, hq, d)
            outh = torch.empty_like(qh)

            def varlen(i):
                return flashcore.attention_varlen(q, k, v, cu, cu, s, s, causal=causal, out=out, check=False)

            seqlens = torch.full((b,), s, device="cuda", dtype=torch.int32)

            def kvcache(i):
                return flashcore.attention_with_kvcache(q4, k4, v4, seqlens, causal=causal, out=out4,
                                                        layout="bshd", check=False)

            def plain64(i):
                return flashcore.attention(q4, k4, v4, causal=causal, layout="bshd", out=out4, block_n=64)

            def plain(i):
                return flashcore.attention(q4, k4, v4, causal=causal, layout="bshd", out=out4)

            def cudnn(i):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, enable_gqa=True)

            ref = cudnn(0).transpose(1, 2).reshape(b * s, hq, d).float()
            got = {}
            extra = (("kvcache", kvcache),) if args.kvcache else ()
            for name, fn in (("varlen", varlen), ("plain-n64", plain64), ("plain", plain)) + extra:
                out.fill_(float("nan"))
                fn(0)
                got[name] = out.clone()
            same = torch.equal(got["varlen"], got["plain-n64"]) and all(torch.equal(got[n], got["varlen"])
                                                                      for n, _ in extra)
            flops = 4 * b * hq * s * s * d * (0.5 if causal else 1.0)
            timed = (("sdpa-cudnn", cudnn), ("varlen", varlen), ("plain-n64", plain64), ("plain", plain)) + extra
            for name, fn in timed:
                err = 0.0 if name == "sdpa-cudnn" else float((got[name].float() - ref).norm() / ref.norm())
                if not err < 2e-2:
                    print(f"B{b} S{s} causal={causal} {name}: WRONG (rel err {err:.3g}); not timed")
                    continue
                us = time_graph(fn, 1).median
                rows.append(dict(batch=b, seqlen=s, causal=causal, backend=name, us=f"{us:.2f}",
                                 tflops=f"{flops / us / 1e6:.1f}", rel_err_vs_cudnn=f"{err:.2e}",
                                 serving_equals_plain_n64=same))
                print(f"B{b} S{s:<5} causal={int(causal)} {name:<10} {us:9.2f} us {flops / us / 1e6:6.1f} TFLOP/s"
                      f"  err {err:.1e}  serving==plain-n64 {same}", flush=True)
    if args.csv and rows:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
