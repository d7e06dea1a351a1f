"""Device timing: per-call CUDA events (eager), CUDA-graph replays, input
rotation, and the machine ceilings measured in the same run.

torch is imported inside the functions that need it, so the statistics helpers
here stay importable (and testable) on machines without torch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, List, Optional, Sequence

# Below this many captured calls a graph replay is dominated by its own launch
# cost; 20 is what the anchors used, so graph numbers compare across runs.
GRAPH_CALLS = 20
GRAPH_REPLAYS = 50
WARMUP = 10
# H100 SXM has 50 MB of L2. Inputs are rotated until the footprint of all sets
# is at least this many times L2, so a timed call rarely finds its operands
# still resident from an earlier call.
L2_FACTOR = 2.0
MAX_SETS = 128


@dataclasses.dataclass
class Stats:
    """Summary of per-call times in microseconds."""

    median: float
    p10: float
    p90: float
    n: int

    @classmethod
    def from_samples(cls, samples_us: Sequence[float]) -> "Stats":
        xs = sorted(float(x) for x in samples_us)
        if not xs:
            raise ValueError("no timing samples")
        return cls(percentile(xs, 50), percentile(xs, 10), percentile(xs, 90), len(xs))


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (numpy's
    default method), without numpy so this module imports anywhere."""
    if not sorted_xs:
        raise ValueError("empty")
    if len(sorted_xs) == 1:
        return float(sorted_xs[0])
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_xs) - 1)
    frac = pos - lo
    return float(sorted_xs[lo]) * (1.0 - frac) + float(sorted_xs[hi]) * frac


def rotation_count(set_bytes: int, l2_bytes: int, factor: float = L2_FACTOR,
                   max_sets: int = MAX_SETS) -> int:
    """How many independent input/output sets to cycle through so that the
    whole rotation is >= factor * L2. Large problems get one set."""
    if set_bytes <= 0:
        return 1
    need = int(math.ceil(factor * l2_bytes / set_bytes))
    return max(1, min(max_sets, need))


def graph_call_count(n_sets: int, base: int = GRAPH_CALLS) -> int:
    """Calls captured in one graph: at least `base`, and a whole number of
    passes over the rotation so every set is touched equally often."""
    n_sets = max(1, n_sets)
    passes = max(1, int(math.ceil(base / n_sets)))
    return passes * n_sets


# ------------------------------------------------------------------ eager mode

def eager_samples(call: Callable[[int], object], n_sets: int, trials: int,
                  warmup: int = WARMUP, start: int = 0) -> List[float]:
    """Per-call times (us), each call between its own pair of events on the
    current stream; call k (warm-up calls first) uses rotation set
    (start + k) % n_sets, so chunks timed one after another, of one contender
    or several, continue one walk over the sets (runner.py interleaves them).

    The events bracket what the GPU sees between two host enqueues, so for
    launch-bound sizes this includes the host dispatch gap, as a model's eager
    forward pass would. Events are created up front and read only after one
    final synchronize, so reading them adds nothing to the timed region.
    """
    import torch

    n_sets = max(1, n_sets)
    for i in range(warmup):
        call((start + i) % n_sets)
    torch.cuda.synchronize()
    first = start + warmup
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
    for i in range(trials):
        starts[i].record()
        call((first + i) % n_sets)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def time_eager(call: Callable[[int], object], n_sets: int, trials: int,
               warmup: int = WARMUP) -> Stats:
    """eager_samples in one block, summarized."""
    return Stats.from_samples(eager_samples(call, n_sets, trials, warmup))


# ------------------------------------------------------------------ graph mode

class GraphTimer:
    """`calls_per_graph` calls (cycling over the rotation sets) captured in one
    CUDA graph; samples() replays it and gives per-call times = replay time /
    calls. Replays are timed one by one with events so the spread is real, not
    a single averaged number. Each replay walks every set from 0 (the call
    count is a whole number of passes: graph_call_count), so back-to-back
    replays of different contenders' graphs keep the rotation's distance.
    close() frees the graph's private memory pool."""

    def __init__(self, call: Callable[[int], object], n_sets: int, calls_per_graph: Optional[int] = None):
        import torch

        self.n_calls = calls_per_graph or graph_call_count(n_sets)
        # Warm up on a side stream before capture, as torch.cuda.graphs
        # requires: lazy initialisation (cuBLAS/cuDNN handles, workspace
        # allocation, kernel selection caches) must not happen inside the
        # capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                call(i % n_sets)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                for i in range(self.n_calls):
                    call(i % n_sets)
            torch.cuda.synchronize()
        except BaseException:
            self.close()
            raise

    def samples(self, replays: int, warmup: int = 0) -> List[float]:
        import torch

        for _ in range(warmup):
            self.graph.replay()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        for r in range(replays):
            starts[r].record()
            self.graph.replay()
            ends[r].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 / self.n_calls for s, e in zip(starts, ends)]

    def close(self) -> None:
        # The graph holds its private memory pool; free it before the next
        # shape allocates, so big shapes do not run out of memory.
        self.graph = None


def time_graph(call: Callable[[int], object], n_sets: int, replays: int = GRAPH_REPLAYS,
               calls_per_graph: Optional[int] = None) -> Stats:
    """One GraphTimer, 3 untimed replays, then `replays` timed ones, summarized."""
    timer = GraphTimer(call, n_sets, calls_per_graph)
    try:
        return Stats.from_samples(timer.samples(replays, warmup=3))
    finally:
        timer.close()


# ------------------------------------------------------------------- ceilings

@dataclasses.dataclass
class Ceilings:
    """Machine numbers measured in the same process, same thermal state."""

    matmul_tflops: dict = dataclasses.field(default_factory=dict)  # dtype -> TFLOP/s
    matmul_tflops_end: dict = dataclasses.field(default_factory=dict)  # re-measured at the end
    copy_gbps: Optional[float] = None
    tiny_eager_us: Optional[float] = None
    tiny_graph_us: Optional[float] = None
    errors: List[str] = dataclasses.field(default_factory=list)


def measure_matmul(dtype_name: str, n: int = 8192, runs: int = 20, warmup: int = 5) -> float:
    """Median TFLOP/s of an n^3 torch.matmul on random data (zeros would let
    the tensor cores' power draw drop and overstate the ceiling)."""
    import torch

    from .backends import torch_dtype

    dt = torch_dtype(dtype_name)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = torch.empty(n, n, device="cuda", dtype=dt)
    for _ in range(warmup):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for i in range(runs):
        starts[i].record()
        torch.matmul(a, b, out=c)
        ends[i].record()
    torch.cuda.synchronize()
    ms = Stats.from_samples([s.elapsed_time(e) for s, e in zip(starts, ends)]).median
    del a, b, c
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def measure_copy(nbytes: int = 1 << 30, runs: int = 20, warmup: int = 3) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read + written
    (the convention of the decode GB/s column, which also counts reads and the
    output write)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(warmup):
        dst.copy_(src)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for i in range(runs):
        starts[i].record()
        dst.copy_(src)
        ends[i].record()
    torch.cuda.synchronize()
    ms = Stats.from_samples([s.elapsed_time(e) for s, e in zip(starts, ends)]).median
    del src, dst
    return 2.0 * nbytes / (ms * 1e-3) / 1e9


def measure_tiny_kernel(trials: int = 200) -> tuple:
    """Launch cost of a trivial kernel: (eager us, us per kernel inside a graph).
    The eager number is the floor of any eager row; the graph number is the
    floor of any graph row."""
    import torch

    x = torch.zeros(1, device="cuda")
    stats_eager = time_eager(lambda i: x.add_(1.0), 1, trials)
    stats_graph = time_graph(lambda i: x.add_(1.0), 1, replays=GRAPH_REPLAYS)
    return stats_eager.median, stats_graph.median


def measure_ceilings(dtypes: Sequence[str], log: Callable[[str], None] = lambda s: None) -> Ceilings:
    """Every measurement guarded on its own: a failed ceiling leaves a blank,
    never a made-up number."""
    c = Ceilings()
    for dt in dtypes:
        if dt in c.matmul_tflops:
            continue
        try:
            c.matmul_tflops[dt] = measure_matmul(dt)
            log(f"matmul ceiling {dt}: {c.matmul_tflops[dt]:.1f} TFLOP/s")
        except Exception as exc:  # noqa: BLE001 - report, never abort the run
            c.errors.append(f"matmul {dt}: {type(exc).__name__}: {exc}")
    try:
        c.copy_gbps = measure_copy()
        log(f"d2d copy: {c.copy_gbps:.0f} GB/s")
    except Exception as exc:  # noqa: BLE001
        c.errors.append(f"copy: {type(exc).__name__}: {exc}")
    try:
        c.tiny_eager_us, c.tiny_graph_us = measure_tiny_kernel()
        log(f"tiny kernel: eager {c.tiny_eager_us:.2f} us, graph {c.tiny_graph_us:.2f} us")
    except Exception as exc:  # noqa: BLE001
        c.errors.append(f"tiny kernel: {type(exc).__name__}: {exc}")
    return c
