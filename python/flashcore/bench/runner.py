"""Drives the measurements: shapes in order; on each shape every contender is
checked first, then timed in interleaved rounds (so they share thermal and
clock conditions: Runner.time_eager_interleaved).
A contender restricted to some suites (Backend.suites) is left out, without a
row, on the shapes of the others.

The device-facing pieces (input creation, the float64 check, the two timers,
synchronisation) are injected, defaulting to the real ones; the tests drive the
control flow with fakes on machines without a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import warnings
from typing import Callable, List, Optional, Sequence

from . import report
from .backends import Backend, applicable, classify_failure, is_cuda_failure, summarize_exception
from .report import Row
from .suites import Shape, io_bytes, uses_graph
from .timing import GRAPH_REPLAYS, WARMUP, Stats, graph_call_count, rotation_count

# Rounds the timed calls of a shape are split into, the contenders taking
# turns in each (Runner.time_eager_interleaved).
ROUNDS = 10


@dataclasses.dataclass
class RunOptions:
    trials: int = 200
    warmup: int = WARMUP
    graph: bool = True
    graph_replays: int = GRAPH_REPLAYS
    graph_threshold_us: float = 200.0
    rounds: int = ROUNDS
    l2_bytes: int = 50 * 10**6


def _default_make_inputs(shape: Shape, n_sets: int, seed: int):
    from .backends import Inputs

    return Inputs(shape, n_sets, seed)


def _default_check(shape: Shape, q, k, v, out):
    from .reference import check_output

    return check_output(shape, q, k, v, out)


def _default_eager_samples(call, n_sets, trials, warmup, start):
    from .timing import eager_samples

    return eager_samples(call, n_sets, trials, warmup, start)


def _default_graph_timer(call, n_sets, calls):
    from .timing import GraphTimer

    return GraphTimer(call, n_sets, calls)


def round_order(n: int, r: int) -> List[int]:
    """Round r's order of n contenders, from a Williams design: over n
    consecutive rounds (2n when n is odd) every contender comes first
    equally often and directly follows every other one equally often, so
    neither its position nor its predecessor favours any contender."""
    if n <= 1:
        return list(range(n))
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows[r % len(rows)]


def split_trials(total: int, rounds: int) -> List[int]:
    """`total` calls in at most `rounds` chunks of sizes differing by at most
    one, none empty."""
    rounds = max(1, min(rounds, total))
    return [total // rounds + (1 if r < total % rounds else 0) for r in range(rounds)] if total > 0 else []


@dataclasses.dataclass
class _Contender:
    """A checked contender of one shape while it is timed."""

    row: Row
    prepared: object
    samples: List[float] = dataclasses.field(default_factory=list)  # of the phase being timed
    alive: bool = True   # still timed in this phase
    timer: object = None  # graph phase: its GraphTimer


def _default_sync():
    import torch

    torch.cuda.synchronize()


def _default_cleanup():
    gc.collect()
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort between shapes
        pass


class Runner:
    def __init__(self, backends: Sequence[Backend], opts: RunOptions, progress=None, *,
                 make_inputs: Callable = _default_make_inputs, check: Callable = _default_check,
                 eager_samples: Callable = _default_eager_samples, graph_timer: Callable = _default_graph_timer,
                 synchronize: Callable = _default_sync, cleanup: Callable = _default_cleanup,
                 on_shape_done: Optional[Callable[[List[Row]], None]] = None):
        self.backends = list(backends)
        self.opts = opts
        self.progress = progress
        self.make_inputs = make_inputs
        self.check = check
        self.eager_samples = eager_samples
        self.graph_timer = graph_timer
        self.synchronize = synchronize
        self.cleanup = cleanup
        self.on_shape_done = on_shape_done
        self.rows: List[Row] = []
        # Set once the CUDA context is unusable (a sticky device fault): every
        # later row then says so instead of reporting a cascade of errors.
        self.dead: Optional[str] = None

    # -------------------------------------------------------------- helpers
    def _log(self, msg: str) -> None:
        if self.progress is not None:
            self.progress.write(msg)

    def _tick(self, label: str) -> None:
        if self.progress is not None:
            self.progress.set_label(label)
            self.progress.update()

    def _health(self) -> Optional[str]:
        try:
            self.synchronize()
            return None
        except Exception as exc:  # noqa: BLE001
            return summarize_exception(exc)

    def _emit(self, row: Row, tick: bool = True) -> None:
        self.rows.append(row)
        if row.status in (report.STATUS_WRONG, report.STATUS_ERROR):
            self._log(f"  {row.backend} {row.shape.label}: {row.status}: {row.reason}")
        if tick:
            self._tick(f"{row.backend} {row.shape.label}")

    # -------------------------------------------------------------- main loop
    def run(self, shapes: Sequence[Shape]) -> List[Row]:
        for idx, shape in enumerate(shapes):
            self._run_shape(idx, shape)
            if self.on_shape_done is not None:
                self.on_shape_done(self.rows)
        return self.rows

    def _run_shape(self, idx: int, shape: Shape) -> None:
        # Contenders restricted to other suites get no row here at all.
        bes = applicable(self.backends, shape)
        if not bes:
            return
        if self.dead:
            for be in bes:
                row = Row.for_shape(shape, be.name)
                row.status, row.reason = report.STATUS_ERROR, f"not run: CUDA context lost earlier ({self.dead})"
                self._emit(row)
            return
        n_sets = rotation_count(io_bytes(shape), self.opts.l2_bytes)
        try:
            inputs = self.make_inputs(shape, n_sets, idx)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory for this shape
            reason = f"inputs: {summarize_exception(exc)}"
            for be in bes:
                row = Row.for_shape(shape, be.name)
                row.status, row.reason = report.STATUS_ERROR, reason
                self._emit(row)
            self.cleanup()
            self.dead = self._health()
            return
        try:
            # Phase 1, every contender in turn: prepare and check.
            results: List[Row] = []        # in backend order, emitted at the end
            checked: List[_Contender] = []  # those that passed, to be timed
            for be in bes:
                if self.dead:
                    row = Row.for_shape(shape, be.name)
                    row.status, row.reason = report.STATUS_ERROR, f"not run: CUDA context lost earlier ({self.dead})"
                else:
                    row, prepared = self.prepare_and_check(shape, be, inputs, n_sets)
                    if row.status == report.STATUS_ERROR:
                        self.dead = self._health()
                    if row.status == report.STATUS_OK and prepared is not None:
                        checked.append(_Contender(row, prepared))
                results.append(row)
                self._tick(f"{be.name} {shape.label}")
            # Phase 2, eager timing, the contenders interleaved (after a
            # CUDA fault in a later check, none of them: error rows).
            if checked:
                self.time_eager_interleaved(checked, n_sets)
            timed = [c for c in checked if c.row.status == report.STATUS_OK]
            # Phase 3, graph mode, decided once per shape so every contender on
            # a shape is timed the same way (and compared on the same basis).
            want_graph = self.opts.graph and any(
                uses_graph(shape, c.row.us_eager, self.opts.graph_threshold_us) for c in timed)
            if want_graph and timed:
                if self.dead:
                    for c in timed:
                        c.row.add_reason("graph mode not run: CUDA context lost")
                else:
                    self.time_graph_interleaved(timed, n_sets)
            del timed, checked
            for row in results:
                self._emit(row, tick=False)
        finally:
            del inputs
            self.cleanup()

    # --------------------------------------------------------- interleaving
    # Under the card's power cap its clock drops with sustained load and
    # recovers in pauses (docs/kernels.md, "Energy per call"), so a contender
    # timed in one block right after a host pause (its correctness check)
    # can meet another clock state than the next one. Each contender's calls
    # are therefore timed in `rounds` chunks, the contenders taking turns
    # within a round, and its median is over all its chunks. What runs just
    # before a chunk sets the clock it starts at (a light contender leaves
    # the card cooler than a heavy one), so the orders of the rounds follow a
    # Williams design (round_order): each contender follows each other one
    # equally often. The rotation sets continue across contenders (eager: one
    # running position; graphs: every replay walks all sets), so a call's
    # inputs were last touched a whole rotation earlier, as in one block.
    def _interleave(self, contenders: List["_Contender"], total: int, chunk, failed) -> None:
        """`total` calls (or replays) of every live contender in interleaved
        rounds: c.samples += chunk(c, r, n) inside c's context for round r's
        n; a chunk that raises calls failed(c, exc), which ends c's timing.
        Stops once the CUDA context is lost."""
        for r, n in enumerate(split_trials(total, self.opts.rounds)):
            order = round_order(len(contenders), r)
            for c in (contenders[i] for i in order):
                if not c.alive or self.dead:
                    continue
                try:
                    with c.prepared.context():
                        c.samples += list(chunk(c, r, n))
                except Exception as exc:  # noqa: BLE001
                    c.alive = False
                    failed(c, exc)

    def time_eager_interleaved(self, contenders: List["_Contender"], n_sets: int) -> None:
        """Eager medians of `opts.trials` calls each, in interleaved rounds:
        `opts.warmup` untimed calls before a contender's first chunk, 2 before
        each later one (their set positions advance too). A failure drops
        that contender with an error row."""
        pos = 0

        def chunk(c, r, n):
            nonlocal pos
            warm = self.opts.warmup if r == 0 else min(2, self.opts.warmup)
            start, pos = pos, pos + warm + n
            return self.eager_samples(c.prepared.call, n_sets, n, warm, start)

        def failed(c, exc):
            _, reason = classify_failure(c.row.backend, exc)
            c.row.status, c.row.reason = report.STATUS_ERROR, f"eager timing: {reason}"
            self.dead = self._health()

        self._interleave(contenders, self.opts.trials, chunk, failed)
        for c in contenders:
            if c.alive and c.samples:
                st = Stats.from_samples(c.samples)
                c.row.us_eager, c.row.us_p10, c.row.us_p90, c.row.trials = st.median, st.p10, st.p90, st.n
            elif c.alive:  # not timed: the context was lost before its turn
                c.row.status = report.STATUS_ERROR
                c.row.reason = f"not timed: CUDA context lost ({self.dead})"
            c.samples = []

    def time_graph_interleaved(self, contenders: List["_Contender"], n_sets: int) -> None:
        """Graph medians of `opts.graph_replays` replays each, in interleaved
        rounds (one untimed replay before each chunk). A failed capture or
        replay is noted in the row, which keeps its eager numbers, unless it
        took the CUDA context down."""
        calls = graph_call_count(n_sets)

        def failed(c, exc):
            if c.timer is not None:
                c.timer.close()
                c.timer = None
            self._graph_failed(c, exc)

        try:
            for c in contenders:
                c.alive = False
                if self.dead:
                    c.row.add_reason("graph mode not run: CUDA context lost")
                    continue
                try:
                    with c.prepared.context():
                        c.timer = self.graph_timer(c.prepared.call, n_sets, calls)
                    c.alive = True
                except Exception as exc:  # noqa: BLE001
                    failed(c, exc)
            self._interleave(contenders, self.opts.graph_replays,
                             lambda c, r, n: c.timer.samples(n, warmup=1), failed)
            for c in contenders:
                if c.timer is not None and c.samples and not self.dead:
                    gs = Stats.from_samples(c.samples)
                    c.row.us_graph, c.row.us_graph_p10, c.row.us_graph_p90 = gs.median, gs.p10, gs.p90
                    c.row.graph_calls = calls
                elif c.timer is not None:
                    c.row.add_reason("graph mode not finished: CUDA context lost")
        finally:
            for c in contenders:
                if c.timer is not None:
                    c.timer.close()
                    c.timer = None
                c.samples = []

    def _graph_failed(self, c: "_Contender", exc: Exception) -> None:
        c.row.add_reason(f"graph capture/replay failed: {summarize_exception(exc, 200)}")
        if is_cuda_failure(exc):
            self.dead = self._health()
            if self.dead:
                c.row.status = report.STATUS_ERROR

    def prepare_and_check(self, shape: Shape, be: Backend, inputs, n_sets: int):
        """(row, prepared); prepared is None when the contender did not pass
        its check (or did not get that far). Never raises."""
        row = Row.for_shape(shape, be.name)
        row.rot_sets = n_sets
        try:
            prepared = be.prepare(shape, inputs)
        except Exception as exc:  # noqa: BLE001
            row.status, row.reason = classify_failure(be.name, exc)
            return row, None
        try:
            with prepared.context():
                self._check(shape, prepared, inputs, row)
        except Exception as exc:  # noqa: BLE001 - e.g. the backend context itself failed
            row.status, row.reason = report.STATUS_ERROR, summarize_exception(exc)
            return row, None
        return row, (prepared if row.status == report.STATUS_OK else None)

    def _check(self, shape: Shape, prepared, inputs, row: Row) -> Row:
        # 1. Correctness first: a wrong kernel is reported, never timed.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = prepared.check_call()
                self.synchronize()
            except Exception as exc:  # noqa: BLE001
                row.status, row.reason = classify_failure(row.backend, exc)
                # SDPA explains a refusal only through warnings; keep them.
                msgs = []
                for w in caught:
                    text = " ".join(str(w.message).split())
                    if text and text not in msgs:
                        msgs.append(text)
                if msgs and row.status == report.STATUS_SKIP:
                    row.add_reason(" / ".join(msgs)[:400])
                row.add_reason(prepared.note)
                return row
        row.add_reason(prepared.note)
        try:
            res = self.check(shape, inputs.q[0], inputs.k[0], inputs.v[0], out)
        except Exception as exc:  # noqa: BLE001
            row.status, row.reason = report.STATUS_ERROR, f"reference check failed: {summarize_exception(exc)}"
            return row
        del out
        row.relerr = res.relerr
        if not res.ok:
            row.status = report.STATUS_WRONG
            row.add_reason(res.detail)
            return row
        return row
