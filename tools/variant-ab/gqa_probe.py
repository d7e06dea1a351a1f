"""Diagnostic (bench/results/2026-11-25c-h100/gqa-probe.txt): does a short-sequence call wait on K/V from DRAM?
Times flashcore at the FA3 grid's 512/1k shapes with every query head on its
own K/V (MHA) and with all heads on one K/V head (GQA, K/V L2-resident), same
query work; cuDNN (MHA) for scale. Prints one line per shape.

  python gqa_probe.py
"""
import torch

import flashcore
from flashcore.bench.timing import time_eager

SHAPES = [  # (B, H, S, D, causal)
    (32, 16, 512, 128, False), (16, 16, 1024, 128, False), (32, 16, 512, 128, True),
    (32, 32, 512, 64, False), (32, 32, 512, 64, True), (32, 8, 512, 256, False),
]


def main():
    torch.manual_seed(0)
    for b, h, s, d, causal in SHAPES:
        row = []
        for hkv in (h, 1):
            sets = []
            for _ in range(2):
                q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
                sets.append((q, k, v))
            f = lambda i: flashcore.attention(*sets[i], causal=causal)
            row.append(time_eager(f, 2, 200).median)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            g = lambda i: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            cu = time_eager(g, 1, 200).median
        print(f"B{b} H{h} S{s} D{d} causal={causal}: flashcore MHA {row[0]:.1f} us, "
              f"GQA(1 KV head) {row[1]:.1f} us ({row[0] / row[1]:.3f}x), cuDNN MHA {cu:.1f} us", flush=True)


if __name__ == "__main__":
    main()
