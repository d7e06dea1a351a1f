"""What `python -m flashcore.bench` does without a GPU: run flashcore's CPU
reference backend on NumPy arrays and compare it with float64 NumPy.

It prints CPU wall times only, labelled as such; no GPU number is printed
because none was measured.
"""

from __future__ import annotations

import math
import sys
import time
from typing import List, Optional, TextIO, Tuple

from .backends import load_flashcore, summarize_exception

DEMO_SHAPE = (1, 8, 512, 64)  # B, H, S, D
# CPU reference accumulates in fp32; inputs rounded to fp16 leave ~3e-4
# relative error, fp32 inputs ~1e-6.
DEMO_TOL = {"float16": 5e-3, "float32": 1e-4}
EXIT_OK, EXIT_MISMATCH, EXIT_NO_FLASHCORE = 0, 1, 2


def numpy_reference(q, k, v, causal: bool, scale: Optional[float] = None):
    """float64 softmax(q k^T * scale) v, causal mask bottom-right aligned
    (query row i may see key j <= i + Sk - Sq), fully masked rows -> zeros."""
    import numpy as np

    q = q.astype(np.float64)
    k = k.astype(np.float64)
    v = v.astype(np.float64)
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        s = np.where(j <= i + (sk - sq), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    denom = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, denom, out=np.zeros_like(p), where=denom > 0)
    return np.einsum("bhij,bhjd->bhid", p, v)


def _errors(out, ref) -> Tuple[float, float]:
    import numpy as np

    o = np.asarray(out, dtype=np.float64)
    diff = o - ref
    return float(np.abs(diff).max()), float(np.linalg.norm(diff) / np.linalg.norm(ref))


def run_cpu_demo(stream: Optional[TextIO] = None, repeats: int = 3, shape=None) -> int:
    stream = stream or sys.stdout
    shape = shape or DEMO_SHAPE  # looked up at call time so tests can shrink it

    def say(msg: str = "") -> None:
        print(msg, file=stream, flush=True)

    fc, reason = load_flashcore()
    if fc is None:
        say(f"flashcore-bench: cannot import flashcore, so there is nothing to demo: {reason}")
        say("flashcore-bench: build the Python extension first (see the README), then run again.")
        return EXIT_NO_FLASHCORE
    try:
        import numpy as np
    except ImportError as exc:
        say(f"flashcore-bench: the CPU demo needs NumPy ({exc})")
        return EXIT_NO_FLASHCORE

    B, H, S, D = shape
    say(f"CPU demo: flashcore.attention on NumPy arrays, B={B} H={H} S={S} D={D} "
        f"(CPU reference backend; wall-clock median of {repeats}, CPU times only)")
    rng = np.random.default_rng(0)
    base = [rng.standard_normal((B, H, S, D)) for _ in range(3)]
    lines: List[List[str]] = []
    ran, failed = 0, 0
    for dtype in ("float16", "float32"):
        q, k, v = (x.astype(dtype) for x in base)
        for causal in (False, True):
            label = [dtype, "causal" if causal else "full"]
            try:
                out = fc.attention(q, k, v, causal=causal)  # first call doubles as warm-up
            except ImportError as exc:
                # The pure-Python package imported but its compiled part did not.
                say(f"flashcore-bench: cannot import flashcore's compiled module: {summarize_exception(exc)}")
                return EXIT_NO_FLASHCORE
            except Exception as exc:  # noqa: BLE001 - report the refusal, try the next case
                lines.append(label + ["-", "-", "-", f"not run: {summarize_exception(exc, 120)}"])
                continue
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                out = fc.attention(q, k, v, causal=causal)
                times.append(time.perf_counter() - t0)
            if isinstance(out, (tuple, list)):
                out = out[0]
            ref = numpy_reference(q, k, v, causal)
            max_abs, rel = _errors(out, ref)
            ok = math.isfinite(rel) and rel <= DEMO_TOL[dtype]
            ran += 1
            failed += 0 if ok else 1
            lines.append(label + [f"{sorted(times)[len(times) // 2] * 1e3:.1f}", f"{max_abs:.2e}",
                                  f"{rel:.2e}", "PASS" if ok else f"FAIL (tol {DEMO_TOL[dtype]:.0e})"])
    headers = ["dtype", "mask", "CPU ms", "max abs err", "rel err", "check vs float64 NumPy"]
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(headers)]
    say("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in lines:
        say("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if ran == 0:
        say("flashcore-bench: flashcore.attention ran on no CPU case (see 'not run' above)")
        return EXIT_MISMATCH
    return EXIT_OK if failed == 0 else EXIT_MISMATCH
