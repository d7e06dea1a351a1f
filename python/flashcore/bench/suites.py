"""Shape lists of the benchmark suites, and the arithmetic derived from a shape.

Pure Python on purpose: the shape lists and the FLOP/byte formulas are what the
published numbers rest on, so they are tested on machines without a GPU
(tests/python/test_bench.py) and must not need torch to import.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

SUITES = ("seeds", "fa3", "decode")

# dtype names used everywhere in the bench (CSV, tables); torch names are
# looked up from these in backends.py.
DTYPES = ("fp16", "bf16", "fp32")
DTYPE_ALIASES = {
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

# Accuracy gate: a backend whose relative Frobenius error against the float64
# reference is above this is reported WRONG and not timed. bf16 keeps 8
# mantissa bits (rounding 2^-9 ~ 2e-3 per element; cuDNN/FA measure ~2.2e-3),
# fp16 keeps 11 (~2.7e-4 measured), so both limits leave ~10x headroom while
# still catching a wrong mask, a wrong scale or a dropped tile.
RELERR_TOL = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-3}

# Tokens per call and model width of the FlashAttention-3 paper's forward grid
# (Shah et al. 2024, figures 5-6): batch = 16k / seqlen, heads = 2048 / hdim.
FA3_TOKENS = 16384
FA3_MODEL_DIM = 2048
FA3_HEAD_DIMS = (64, 128, 256)
FA3_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)

SEEDS_SEQLENS = (128, 256, 512)
SEEDS_BATCHES = (1, 8, 16, 32)
SEEDS_HEADS = 16
SEEDS_HEAD_DIM = 64

DECODE_BATCHES = (1, 16, 64)
DECODE_KV_LENS = (4096, 32768)
DECODE_HEADS_Q = 32
DECODE_HEADS_KV = 8
DECODE_HEAD_DIM = 128


@dataclasses.dataclass(frozen=True)
class Shape:
    """One attention problem: q (B, H, Sq, D), k/v (B, Hkv, Sk, D), layout BHSD."""

    suite: str
    B: int
    H: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    causal: bool
    dtype: str

    @property
    def group(self) -> int:
        return self.H // self.Hkv

    @property
    def label(self) -> str:
        """Compact human label used in tables and progress bars."""
        heads = f"H{self.H}" if self.H == self.Hkv else f"H{self.H}/{self.Hkv}"
        seq = f"S{self.Sq}" if self.Sq == self.Sk else f"Sq{self.Sq} Sk{self.Sk}"
        mask = "causal" if self.causal else "full"
        return f"B{self.B} {heads} {seq} D{self.D} {mask}"


def normalize_dtype(name: str) -> str:
    key = name.strip().lower()
    if key not in DTYPE_ALIASES:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    return DTYPE_ALIASES[key]


# ----------------------------------------------------------------- shape lists

def seeds_shapes(quick: bool = False) -> List[Shape]:
    """The shapes of the old seed reports: fp16, D=64, H=16, non-causal grid,
    plus B=1 S=1024 with and without the causal mask."""
    seqlens = (128, 512) if quick else SEEDS_SEQLENS
    batches = (1, 32) if quick else SEEDS_BATCHES
    out = [Shape("seeds", b, SEEDS_HEADS, SEEDS_HEADS, s, s, SEEDS_HEAD_DIM, False, "fp16")
           for s in seqlens for b in batches]
    tail_masks = (True,) if quick else (False, True)
    out += [Shape("seeds", 1, SEEDS_HEADS, SEEDS_HEADS, 1024, 1024, SEEDS_HEAD_DIM, c, "fp16")
            for c in tail_masks]
    return out


def fa3_shapes(quick: bool = False) -> List[Shape]:
    """FlashAttention-3 paper grid: bf16, 16k tokens per call, model dim 2048.
    Ordered head dim, then mask, then seqlen (the order of the paper's plots)."""
    hdims = (128,) if quick else FA3_HEAD_DIMS
    seqlens = (1024, 8192) if quick else FA3_SEQLENS
    out = []
    for d in hdims:
        for causal in (False, True):
            for s in seqlens:
                h = FA3_MODEL_DIM // d
                out.append(Shape("fa3", FA3_TOKENS // s, h, h, s, s, d, causal, "bf16"))
    return out


def decode_shapes(quick: bool = False) -> List[Shape]:
    """One new query token against a KV cache, GQA 32 query heads / 8 KV heads."""
    if quick:
        pairs = [(1, 4096), (16, 32768)]
    else:
        pairs = [(b, sk) for b in DECODE_BATCHES for sk in DECODE_KV_LENS]
    return [Shape("decode", b, DECODE_HEADS_Q, DECODE_HEADS_KV, 1, sk, DECODE_HEAD_DIM, False, "bf16")
            for b, sk in pairs]


SUITE_BUILDERS = {"seeds": seeds_shapes, "fa3": fa3_shapes, "decode": decode_shapes}


def parse_suites(text: str) -> List[str]:
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not names or names == ["all"]:
        return list(SUITES)
    bad = [n for n in names if n not in SUITES]
    if bad:
        raise ValueError(f"unknown suite(s) {', '.join(bad)}; choose from {', '.join(SUITES)}")
    # Keep the canonical order so tables and plots come out the same every run.
    return [s for s in SUITES if s in names]


def parse_shape(text: str, dtype: str = "bf16") -> Shape:
    """--shape B,H,S,D[,causal]  (causal: 0/1, true/false, causal/full)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) not in (4, 5):
        raise ValueError(f"--shape wants B,H,S,D[,causal], got {text!r}")
    try:
        b, h, s, d = (int(p) for p in parts[:4])
    except ValueError:
        raise ValueError(f"--shape wants integers for B,H,S,D, got {text!r}") from None
    if min(b, h, s, d) <= 0:
        raise ValueError(f"--shape sizes must be positive, got {text!r}")
    causal = False
    if len(parts) == 5:
        flag = parts[4].lower()
        if flag in ("1", "true", "yes", "causal", "c"):
            causal = True
        elif flag in ("0", "false", "no", "full", "nc", "noncausal", "non-causal"):
            causal = False
        else:
            raise ValueError(f"--shape causal flag must be 0/1/causal/full, got {parts[4]!r}")
    return Shape("custom", b, h, h, s, s, d, causal, normalize_dtype(dtype))


def build_shapes(suites: Sequence[str], quick: bool = False,
                 custom: Optional[Sequence[Shape]] = None) -> List[Shape]:
    """Shapes in run order. A --shape one-off replaces the suites."""
    if custom:
        return list(custom)
    out: List[Shape] = []
    for name in suites:
        out.extend(SUITE_BUILDERS[name](quick))
    return out


# ------------------------------------------------------------- derived numbers

def attention_flops(shape: Shape) -> float:
    """FLOPs of the two matmuls, the convention of the FlashAttention papers:
    4 * B * H * Sq * Sk * D (QK^T and PV, 2 FLOPs per multiply-add), halved for
    a causal mask when Sq == Sk (half of the score matrix is skipped).
    With Sq != Sk the bottom-right causal mask skips a different fraction; we
    keep the full count there rather than invent one, which is moot for the
    shipped suites (decode is non-causal)."""
    f = 4.0 * shape.B * shape.H * shape.Sq * shape.Sk * shape.D
    if shape.causal and shape.Sq == shape.Sk:
        f /= 2.0
    return f


def io_bytes(shape: Shape) -> int:
    """Compulsory HBM traffic: read q, k, v once and write out once. For decode
    this is nearly all K and V, so bytes/time is the effective bandwidth."""
    es = DTYPE_BYTES[shape.dtype]
    q = shape.B * shape.H * shape.Sq * shape.D
    kv = 2 * shape.B * shape.Hkv * shape.Sk * shape.D
    return es * (q + kv + q)


def tflops(shape: Shape, us: Optional[float]) -> Optional[float]:
    if us is None or not us > 0:
        return None
    return attention_flops(shape) / (us * 1e-6) / 1e12


def gbps(shape: Shape, us: Optional[float]) -> Optional[float]:
    if us is None or not us > 0:
        return None
    return io_bytes(shape) / (us * 1e-6) / 1e9


def speedup(flashcore_us: Optional[float], competitor_us: Optional[float]) -> Optional[float]:
    """Ratio reported in the tables: competitor time / flashcore time, so a
    value above 1 means flashcore is faster."""
    if flashcore_us is None or competitor_us is None or not flashcore_us > 0:
        return None
    return competitor_us / flashcore_us


def uses_graph(shape: Shape, eager_us: Optional[float], threshold_us: float = 200.0) -> bool:
    """CUDA-graph timing is meant for launch-bound sizes: always for the seeds
    and decode suites, and for other cells whose eager time is short enough that
    host launch gaps are a visible fraction of it."""
    if shape.suite in ("seeds", "decode"):
        return True
    return eager_us is not None and eager_us < threshold_us
