"""Float64 correctness gate run on the GPU before any contender is timed.

A full float64 reference of a 16k-token problem would cost more than the whole
benchmark, so big problems are checked on a random subset of (batch, head)
pairs and of query rows; every row that is checked sees all of its keys, so
masking and the softmax normalisation are fully exercised. The whole output is
still scanned for non-finite values, which catches any tile the kernel left
unwritten (outputs are poisoned with NaN before the check call).
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import List, Optional, Sequence, Tuple

from .suites import RELERR_TOL, Shape

MAX_PAIRS = 8
MAX_ROWS = 256


@dataclasses.dataclass
class CheckResult:
    relerr: float
    max_abs: float
    nonfinite: int
    pairs: int
    rows: int
    ok: bool
    detail: str


def pick_pairs(B: int, H: int, max_pairs: int = MAX_PAIRS, seed: int = 0) -> List[Tuple[int, int]]:
    """All (b, h) when few, else a seeded sample that always contains the first
    and last pair (edge batches/heads are where stride bugs show)."""
    allp = [(b, h) for b in range(B) for h in range(H)]
    if len(allp) <= max_pairs:
        return allp
    rng = random.Random(seed)
    middle = rng.sample(allp[1:-1], max_pairs - 2)
    return sorted({allp[0], allp[-1], *middle})


def pick_rows(Sq: int, max_rows: int = MAX_ROWS, seed: int = 1) -> List[int]:
    """All rows when few, else a seeded sample with both ends (row 0 sees one
    key under a causal mask, the last row sees all of them)."""
    if Sq <= max_rows:
        return list(range(Sq))
    rng = random.Random(seed)
    middle = rng.sample(range(1, Sq - 1), max_rows - 2)
    return sorted({0, Sq - 1, *middle})


def allowed_mask(rows: Sequence[int], Sq: int, Sk: int, causal: bool):
    """Boolean (len(rows), Sk) mask, bottom-right aligned as in flashcore's API
    (query row i sits at key position i + Sk - Sq). For Sq == Sk, the only
    causal case in the suites, this equals SDPA's top-left is_causal."""
    import torch

    r = torch.as_tensor(list(rows), device="cuda", dtype=torch.int64).unsqueeze(1)
    j = torch.arange(Sk, device="cuda", dtype=torch.int64).unsqueeze(0)
    if not causal:
        return torch.ones(len(rows), Sk, dtype=torch.bool, device="cuda")
    return j <= r + (Sk - Sq)


def check_output(shape: Shape, q, k, v, out, scale: Optional[float] = None,
                 max_pairs: int = MAX_PAIRS, max_rows: int = MAX_ROWS, seed: int = 0) -> CheckResult:
    """Relative Frobenius error ||out - ref|| / ||ref|| over the sampled entries."""
    import torch

    expect = (shape.B, shape.H, shape.Sq, shape.D)
    if tuple(out.shape) != expect:
        return CheckResult(math.inf, math.inf, 0, 0, 0, False,
                           f"output shape {tuple(out.shape)} != expected {expect}")
    if out.dtype != q.dtype:
        return CheckResult(math.inf, math.inf, 0, 0, 0, False,
                           f"output dtype {out.dtype} != input dtype {q.dtype}")
    nonfinite = int((~torch.isfinite(out)).sum().item())
    scale = 1.0 / math.sqrt(shape.D) if scale is None else scale
    pairs = pick_pairs(shape.B, shape.H, max_pairs, seed)
    rows = pick_rows(shape.Sq, max_rows, seed + 1)
    rows_t = torch.as_tensor(rows, device="cuda", dtype=torch.int64)
    mask = allowed_mask(rows, shape.Sq, shape.Sk, shape.causal)
    err2 = 0.0
    ref2 = 0.0
    max_abs = 0.0
    for b, h in pairs:
        hk = h // shape.group  # GQA: query head h reads KV head h // group
        qd = q[b, h].index_select(0, rows_t).double()
        kd = k[b, hk].double()
        vd = v[b, hk].double()
        s = (qd @ kd.transpose(0, 1)) * scale
        s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        # A row with no allowed key (only possible when Sq > Sk under a causal
        # mask) is defined as zeros, as in flashcore's API.
        p = torch.nan_to_num(p, nan=0.0)
        ref = p @ vd
        got = out[b, h].index_select(0, rows_t).double()
        diff = torch.nan_to_num(got - ref, nan=math.inf)
        err2 += float((diff * diff).sum().item())
        ref2 += float((ref * ref).sum().item())
        max_abs = max(max_abs, float(diff.abs().max().item()))
    relerr = math.sqrt(err2 / ref2) if ref2 > 0 else (0.0 if err2 == 0 else math.inf)
    tol = RELERR_TOL[shape.dtype]
    ok = nonfinite == 0 and relerr <= tol
    detail = f"relerr {relerr:.2e} (tol {tol:.0e}) over {len(pairs)} (b,h) x {len(rows)} rows"
    if nonfinite:
        detail += f"; {nonfinite} non-finite outputs (unwritten or overflowed)"
    return CheckResult(relerr, max_abs, nonfinite, len(pairs), len(rows), ok, detail)
