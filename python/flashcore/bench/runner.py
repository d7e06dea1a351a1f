"""Drives the measurements: shapes in order, every contender back-to-back on
each shape (so they share thermal and clock conditions), check before time.
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
from .timing import GRAPH_REPLAYS, WARMUP, graph_call_count, rotation_count


@dataclasses.dataclass
class RunOptions:
    trials: int = 200
    warmup: int = WARMUP
    graph: bool = True
    graph_replays: int = GRAPH_REPLAYS
    graph_threshold_us: float = 200.0
    l2_bytes: int = 50 * 10**6


def _default_make_inputs(shape: Shape, n_sets: int, seed: int):
    from .backends import Inputs

    return Inputs(shape, n_sets, seed)


def _default_check(shape: Shape, q, k, v, out):
    from .reference import check_output

    return check_output(shape, q, k, v, out)


def _default_time_eager(call, n_sets, trials, warmup):
    from .timing import time_eager

    return time_eager(call, n_sets, trials, warmup)


def _default_time_graph(call, n_sets, replays, calls):
    from .timing import time_graph

    return time_graph(call, n_sets, replays, calls)


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
                 time_eager: Callable = _default_time_eager, time_graph: Callable = _default_time_graph,
                 synchronize: Callable = _default_sync, cleanup: Callable = _default_cleanup,
                 on_shape_done: Optional[Callable[[List[Row]], None]] = None):
        self.backends = list(backends)
        self.opts = opts
        self.progress = progress
        self.make_inputs = make_inputs
        self.check = check
        self.time_eager = time_eager
        self.time_graph = time_graph
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
            # Phase 1, every contender back-to-back: check, then eager timing.
            results: List[Row] = []        # in backend order, emitted at the end
            timed = []                     # (row, prepared) that passed and were timed
            for be in bes:
                if self.dead:
                    row = Row.for_shape(shape, be.name)
                    row.status, row.reason = report.STATUS_ERROR, f"not run: CUDA context lost earlier ({self.dead})"
                else:
                    row, prepared = self.check_and_time_eager(shape, be, inputs, n_sets)
                    if row.status == report.STATUS_ERROR:
                        self.dead = self._health()
                    if row.status == report.STATUS_OK and prepared is not None:
                        timed.append((row, prepared))
                results.append(row)
                self._tick(f"{be.name} {shape.label}")
            # Phase 2, graph mode, decided once per shape so every contender on
            # a shape is timed the same way (and compared on the same basis).
            want_graph = self.opts.graph and any(
                uses_graph(shape, row.us_eager, self.opts.graph_threshold_us) for row, _ in timed)
            for row, prepared in timed:
                if not want_graph:
                    continue
                if self.dead:
                    row.add_reason("graph mode not run: CUDA context lost")
                    continue
                self.time_graph_mode(shape, prepared, n_sets, row)
            del timed
            for row in results:
                self._emit(row, tick=False)
        finally:
            del inputs
            self.cleanup()

    def run_one(self, shape: Shape, be: Backend, inputs, n_sets: int) -> Row:
        """One contender on one shape, eager then graph as the policy says;
        never raises. (run() interleaves the phases across contenders.)"""
        row, prepared = self.check_and_time_eager(shape, be, inputs, n_sets)
        if (row.status == report.STATUS_OK and prepared is not None and self.opts.graph
                and uses_graph(shape, row.us_eager, self.opts.graph_threshold_us)):
            self.time_graph_mode(shape, prepared, n_sets, row)
        return row

    def check_and_time_eager(self, shape: Shape, be: Backend, inputs, n_sets: int):
        """(row, prepared); prepared is None when the contender did not get as
        far as timing. Never raises."""
        row = Row.for_shape(shape, be.name)
        row.rot_sets = n_sets
        try:
            prepared = be.prepare(shape, inputs)
        except Exception as exc:  # noqa: BLE001
            row.status, row.reason = classify_failure(be.name, exc)
            return row, None
        try:
            with prepared.context():
                self._check_and_time(shape, prepared, inputs, n_sets, row)
        except Exception as exc:  # noqa: BLE001 - e.g. the backend context itself failed
            row.status, row.reason = report.STATUS_ERROR, summarize_exception(exc)
            return row, None
        return row, (prepared if row.status == report.STATUS_OK else None)

    def time_graph_mode(self, shape: Shape, prepared, n_sets: int, row: Row) -> None:
        """Graph timing into `row`; a failure is noted in the row and keeps the
        eager numbers, unless it took the CUDA context down."""
        calls = graph_call_count(n_sets)
        try:
            with prepared.context():
                gs = self.time_graph(prepared.call, n_sets, self.opts.graph_replays, calls)
            row.us_graph, row.us_graph_p10, row.us_graph_p90 = gs.median, gs.p10, gs.p90
            row.graph_calls = calls
        except Exception as exc:  # noqa: BLE001
            row.add_reason(f"graph capture/replay failed: {summarize_exception(exc, 200)}")
            if is_cuda_failure(exc):
                self.dead = self._health()
                if self.dead:
                    row.status = report.STATUS_ERROR

    def _check_and_time(self, shape: Shape, prepared, inputs, n_sets: int, row: Row) -> Row:
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

        # 2. Eager: every call between its own pair of events.
        try:
            st = self.time_eager(prepared.call, n_sets, self.opts.trials, self.opts.warmup)
        except Exception as exc:  # noqa: BLE001
            _, reason = classify_failure(row.backend, exc)
            row.status, row.reason = report.STATUS_ERROR, f"eager timing: {reason}"
            return row
        row.us_eager, row.us_p10, row.us_p90, row.trials = st.median, st.p10, st.p90, st.n
        return row
