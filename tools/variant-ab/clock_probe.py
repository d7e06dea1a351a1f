"""Runs one shape with the flashcore build on PYTHONPATH back to back for a
few seconds while nvidia-smi samples the SM clock and the board power, and
prints one line: the median time per call and the median clock and power
over the loop. Tells whether two variants differ in work or in the clock
the 700 W cap leaves them (a variant that draws less power runs faster).

  python clock_probe.py VARIANT B,H,S,D[,causal] [SECONDS]

VARIANT "sdpa-cudnn" or "sdpa-flash" runs that SDPA backend on the same
inputs instead of flashcore: whether a competitor's lead is fewer cycles or
more of them at a higher clock under the same cap. Its calls go through the
backend context and allocate their output each time: fine for calls of
100 us and more, where the host keeps ahead of the GPU.
"""
import statistics
import subprocess
import sys
import time

import torch

import flashcore

SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION"}


def attention_fn(name, causal):
    """The call to loop: flashcore's, or an SDPA backend's for sdpa-* names."""
    if name not in SDPA_BACKENDS:
        return lambda q, k, v, out: flashcore.attention(q, k, v, causal=causal, out=out)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, SDPA_BACKENDS[name])

    def run(q, k, v, out):
        with sdpa_kernel([backend]):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def main():
    name, shape = sys.argv[1], sys.argv[2].split(",")
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
    B, H, S, D = (int(x) for x in shape[:4])
    causal = "causal" in shape[4:]
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    fn = attention_fn(name, causal)
    for _ in range(20):
        fn(q, k, v, out)
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    times, t_end = [], time.time() + seconds
    while time.time() < t_end:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        ev[0].record()
        for _ in range(10):
            fn(q, k, v, out)
        ev[1].record()
        ev[1].synchronize()
        times.append(ev[0].elapsed_time(ev[1]) * 100.0)  # us per call
    smi.terminate()
    rows = [line.split(",") for line in smi.communicate()[0].splitlines() if line.count(",") == 1]
    clocks = [float(r[0]) for r in rows]
    power = [float(r[1]) for r in rows]
    print(f"{name} {sys.argv[2]}: {statistics.median(times):.1f} us/call over {len(times) * 10} calls; "
          f"SM clock median {statistics.median(clocks):.0f} MHz (min {min(clocks):.0f}, max {max(clocks):.0f}), "
          f"power median {statistics.median(power):.0f} W ({len(rows)} samples)", flush=True)


if __name__ == "__main__":
    main()
