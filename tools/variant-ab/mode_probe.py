"""Is a bimodal cell's mode set by where its inputs sit in memory?

Head dim 256's unmasked 2k-key cell (bf16, batch 8, 8 heads) times at
393-398 us in some processes and 410-425 us in others, in every build
(bench/results/2026-11-27b-h100/ab3-lean-2k-*; docs/kernels.md, "Next
experiments"). This probe, in ONE
process, allocates the inputs again at PLACEMENTS different addresses (a pad
of a random number of 2 MiB pages before each set, every set kept alive)
and times flashcore and cuDNN on each placement, interleaved, events around
each call, median of TRIALS. If the placements split into the two modes,
the mode follows the addresses (L2 slice / HBM channel hashing of K and V);
if every placement lands in one mode, it is a property of the process or
the machine state (clocks, which SMs the clusters get).

  python mode_probe.py [B,H,S,D[,causal]] [PLACEMENTS] [TRIALS]

Prints one line a placement: the 2 MiB page offsets of Q, K and V, flashcore
and cuDNN medians (us; each the median of its two measurements, shown in
brackets) and the wall-clock start of each measurement (to line up with an
nvidia-smi clock log), then the output fingerprints (must be one) and the
placements sorted by flashcore's time. 2026-11-27c: the mode follows the
clock state, not the addresses (docs/kernels.md, "Next experiments").
"""
import hashlib
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore
from flashcore.bench.timing import time_eager

PAGE = 2 << 20


def median_us(fn, trials):
    """The benchmark's eager timing (events around each call), one input set."""
    return time_eager(lambda _: fn(), 1, trials).median


def main():
    shape = (sys.argv[1] if len(sys.argv) > 1 else "8,8,2048,256").split(",")
    B, H, S, D = map(int, shape[:4])
    causal = len(shape) > 4 and shape[4] in ("1", "causal", "c")
    placements = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    trials = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    rng = random.Random(0)
    torch.manual_seed(0)
    # One set of values, copied to every placement: the outputs must agree bit for bit.
    src = [torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    keep, rows, bits = [], [], set()
    for p in range(placements):
        pad = torch.empty(rng.randrange(1, 64) * PAGE, dtype=torch.uint8, device="cuda")
        q, k, v = (x.clone() for x in src)
        o = torch.empty_like(q)
        keep += [pad, q, k, v, o]

        def fc():
            flashcore.attention(q, k, v, causal=causal, out=o)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        fc()
        torch.cuda.synchronize()
        bits.add(hashlib.sha1(o.float().cpu().numpy().tobytes()).hexdigest()[:12])
        # Interleaved, twice each, so a clock drift hits both.
        # The wall-clock start of each measurement, to line up with a clock
        # and power log (nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw -lms 20).
        t_fc, t_dnn, starts = [], [], []
        for _ in range(2):
            starts.append(time.time())
            t_fc.append(median_us(fc, trials))
            starts.append(time.time())
            t_dnn.append(median_us(cudnn, trials))
        pages = "/".join(str((x.data_ptr() // PAGE) % 4096) for x in (q, k, v))
        row = (statistics.median(t_fc), statistics.median(t_dnn), p)
        rows.append(row)
        print(f"placement {p:2d} pages(q/k/v mod 4096) {pages:>16}  flashcore {row[0]:8.1f} "
              f"({t_fc[0]:.1f}/{t_fc[1]:.1f})  cudnn {row[1]:8.1f} ({t_dnn[0]:.1f}/{t_dnn[1]:.1f})  starts "
              + " ".join(f"{t:.3f}" for t in starts), flush=True)
    print(f"output bits: {len(bits)} distinct fingerprint(s) over {placements} placements")
    print("sorted by flashcore: " + " ".join(f"{r[0]:.1f}(p{r[2]})" for r in sorted(rows)))
    print("sorted by cudnn:     " + " ".join(f"{r[1]:.1f}(p{r[2]})" for r in sorted(rows, key=lambda r: r[1])))


if __name__ == "__main__":
    main()
