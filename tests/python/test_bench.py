"""Tests of the benchmark package (flashcore.bench) that need no GPU: the
shape lists the published numbers rest on, the FLOP/byte formulas, the
writers, the speedup direction, the runner's control flow (driven with fakes)
and the no-GPU path of `python -m flashcore.bench`.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import io
import math
import os
import sys
import types

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BENCH_MODULES = ("suites", "timing", "backends", "reference", "report", "plot", "progress",
                  "env", "runner", "cpu_demo", "__main__")


def _import_bench():
    """Import flashcore.bench.* even when flashcore's compiled module is not
    built: the bench's pure-Python parts must stay testable then. A stand-in
    parent package is used only while importing and removed afterwards, so
    other test files still see the real import error."""
    try:
        import flashcore  # noqa: F401
        stub = None
    except ImportError:
        stub = types.ModuleType("flashcore")
        stub.__path__ = [os.path.join(_REPO, "python", "flashcore")]
        sys.modules["flashcore"] = stub
    try:
        mods = {name: importlib.import_module(f"flashcore.bench.{name}") for name in _BENCH_MODULES}
    finally:
        if stub is not None and sys.modules.get("flashcore") is stub:
            del sys.modules["flashcore"]
    return types.SimpleNamespace(**{k.strip("_") or k: v for k, v in mods.items()})


bench = _import_bench()
suites = bench.suites
report = bench.report
timing = bench.timing
runner_mod = bench.runner
backends = bench.backends
cli = bench.main  # flashcore.bench.__main__


def _flashcore_works() -> bool:
    fc, _ = backends.load_flashcore()
    return fc is not None


# ------------------------------------------------------------------ suites

def test_fa3_grid_is_the_paper_grid():
    shapes = suites.fa3_shapes()
    assert len(shapes) == 36
    assert {s.D for s in shapes} == {64, 128, 256}
    assert {s.Sq for s in shapes} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {s.causal for s in shapes} == {False, True}
    for s in shapes:
        assert s.B * s.Sq == 16384, s          # 16k tokens per call
        assert s.H * s.D == 2048, s            # model dim 2048
        assert s.Hkv == s.H and s.Sq == s.Sk
        assert s.dtype == "bf16" and s.suite == "fa3"
    assert len({(s.D, s.causal, s.Sq) for s in shapes}) == 36


def test_seeds_shapes():
    shapes = suites.seeds_shapes()
    grid = [s for s in shapes if s.Sq in (128, 256, 512)]
    assert len(grid) == 12
    assert {(s.B, s.Sq) for s in grid} == {(b, q) for b in (1, 8, 16, 32) for q in (128, 256, 512)}
    assert all(not s.causal for s in grid)
    tail = [s for s in shapes if s.Sq == 1024]
    assert sorted(s.causal for s in tail) == [False, True]
    assert all(s.B == 1 for s in tail)
    for s in shapes:
        assert (s.dtype, s.H, s.Hkv, s.D, s.Sq) == ("fp16", 16, 16, 64, s.Sk)
    assert len(shapes) == 14


def test_decode_shapes():
    shapes = suites.decode_shapes()
    assert {(s.B, s.Sk) for s in shapes} == {(b, sk) for b in (1, 16, 64) for sk in (4096, 32768)}
    for s in shapes:
        assert (s.Sq, s.H, s.Hkv, s.D, s.dtype, s.causal) == (1, 32, 8, 128, "bf16", False)
        assert s.group == 4


@pytest.mark.parametrize("builder", [suites.seeds_shapes, suites.fa3_shapes, suites.decode_shapes])
def test_quick_is_a_nonempty_subset(builder):
    full = set(builder())
    quick = builder(quick=True)
    assert quick and set(quick) <= full and len(quick) < len(full)


def test_parse_shape_and_suites():
    s = suites.parse_shape("2,16,1024,128,causal", "bf16")
    assert (s.B, s.H, s.Hkv, s.Sq, s.Sk, s.D, s.causal, s.dtype, s.suite) == \
        (2, 16, 16, 1024, 1024, 128, True, "bf16", "custom")
    assert suites.parse_shape("1,2,3,4", "float16").causal is False
    assert suites.parse_shape("1,2,3,4,0", "fp16").dtype == "fp16"
    for bad in ("1,2,3", "1,2,3,x", "1,2,3,4,maybe", "0,2,3,4"):
        with pytest.raises(ValueError):
            suites.parse_shape(bad)
    assert suites.parse_suites("decode,seeds") == ["seeds", "decode"]  # canonical order
    assert suites.parse_suites("all") == ["seeds", "fa3", "decode"]
    with pytest.raises(ValueError):
        suites.parse_suites("seeds,nope")


def test_parse_backends():
    assert backends.parse_backends(None) == list(backends.ALL_BACKENDS)
    assert backends.parse_backends("all") == ["flashcore", "flashcore-kv", "flashcore-paged",
                                              "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
    assert backends.parse_backends("cudnn,fc") == ["flashcore", "sdpa-cudnn"]
    assert backends.parse_backends("sdpa") == ["sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
    assert backends.parse_backends("fc-paged,flashcore-kv,fc") == ["flashcore", "flashcore-kv", "flashcore-paged"]
    assert backends.parse_backends("FC-KV, cudnn") == ["flashcore-kv", "sdpa-cudnn"]
    with pytest.raises(ValueError):
        backends.parse_backends("triton")


def test_kv_contenders_declare_the_decode_suite_only():
    made = backends.make_backends(list(backends.ALL_BACKENDS))
    assert [b.name for b in made] == list(backends.ALL_BACKENDS)
    decode = suites.decode_shapes(quick=True)[0]
    for shape in (suites.seeds_shapes()[0], suites.fa3_shapes()[0], suites.parse_shape("1,2,64,32")):
        assert [b.name for b in backends.applicable(made, shape)] == \
            ["flashcore", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
    assert [b.name for b in backends.applicable(made, decode)] == list(backends.ALL_BACKENDS)


# ------------------------------------------------------------------ formulas

def test_flops_formula_and_causal_halving():
    full = suites.Shape("fa3", 4, 16, 16, 4096, 4096, 128, False, "bf16")
    causal = suites.Shape("fa3", 4, 16, 16, 4096, 4096, 128, True, "bf16")
    assert suites.attention_flops(full) == 4 * 4 * 16 * 4096 * 4096 * 128
    assert suites.attention_flops(causal) == suites.attention_flops(full) / 2
    # Sq != Sk: no halving (decode-like cross shapes keep the full count)
    cross = suites.Shape("custom", 1, 8, 8, 128, 4096, 64, True, "bf16")
    assert suites.attention_flops(cross) == 4 * 8 * 128 * 4096 * 64
    # 1 ms for the full shape -> FLOPs / 1e-3 / 1e12 TFLOP/s
    assert suites.tflops(full, 1000.0) == pytest.approx(4 * 4 * 16 * 4096 * 4096 * 128 / 1e-3 / 1e12)
    assert suites.tflops(full, None) is None and suites.tflops(full, 0.0) is None


def test_io_bytes_and_gbps_decode():
    s = suites.Shape("decode", 16, 32, 8, 1, 32768, 128, False, "bf16")
    q = 16 * 32 * 1 * 128
    kv = 2 * 16 * 8 * 32768 * 128
    assert suites.io_bytes(s) == 2 * (q + kv + q)
    assert suites.gbps(s, 100.0) == pytest.approx(suites.io_bytes(s) / 100e-6 / 1e9)


def test_speedup_direction():
    # competitor 20 us, flashcore 10 us -> 2.0: flashcore is twice as fast
    assert suites.speedup(10.0, 20.0) == 2.0
    assert suites.speedup(20.0, 10.0) == 0.5
    assert suites.speedup(None, 10.0) is None


def test_graph_policy():
    seeds = suites.seeds_shapes()[0]
    fa3 = suites.fa3_shapes()[0]
    assert suites.uses_graph(seeds, 5000.0)
    assert suites.uses_graph(fa3, 150.0) and not suites.uses_graph(fa3, 250.0)


# ------------------------------------------------------------------ timing helpers

def test_stats_and_rotation():
    st = timing.Stats.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (st.median, st.n) == (3.0, 5)
    assert st.p10 == pytest.approx(1.4) and st.p90 == pytest.approx(4.6)
    assert timing.rotation_count(1 << 20, 50 * 10**6) == 96        # 1 MiB sets -> ~100 MB
    assert timing.rotation_count(256 << 20, 50 * 10**6) == 1       # big inputs: one set
    assert timing.rotation_count(1, 50 * 10**6) == timing.MAX_SETS
    assert timing.graph_call_count(1) == 20
    assert timing.graph_call_count(7) == 21 and timing.graph_call_count(96) == 96


def test_sampling_for_reference():
    ref = bench.reference
    assert ref.pick_pairs(2, 3) == [(b, h) for b in range(2) for h in range(3)]
    pairs = ref.pick_pairs(32, 16, max_pairs=8)
    assert len(pairs) == 8 and (0, 0) in pairs and (31, 15) in pairs
    rows = ref.pick_rows(16384, max_rows=256)
    assert len(rows) == 256 and rows[0] == 0 and rows[-1] == 16383 and rows == sorted(set(rows))
    assert ref.pick_rows(100) == list(range(100))


# ------------------------------------------------------------------ report writers

def _fake_rows():
    shp = suites.Shape("seeds", 8, 16, 16, 256, 256, 64, False, "fp16")
    mk = report.Row.for_shape
    fc = mk(shp, "flashcore"); fc.us_eager, fc.us_graph, fc.us_p10, fc.us_p90 = 20.0, 8.0, 18.0, 25.0
    fl = mk(shp, "sdpa-flash"); fl.us_eager, fl.us_graph = 30.0, 12.0
    cu = mk(shp, "sdpa-cudnn"); cu.us_eager, cu.us_graph = 25.0, 10.0
    ef = mk(shp, "sdpa-efficient"); ef.us_eager = 5.0; ef.status = report.STATUS_WRONG; ef.reason = "relerr 1e-1"
    dshape = suites.Shape("decode", 1, 32, 8, 1, 4096, 128, False, "bf16")
    d_fc = mk(dshape, "flashcore"); d_fc.status, d_fc.reason = report.STATUS_SKIP, "NotImplementedError: decode"
    d_cu = mk(dshape, "sdpa-cudnn"); d_cu.us_eager, d_cu.us_graph = 40.0, 10.0
    return [fc, fl, cu, ef, d_fc, d_cu]


def test_finalize_derived_columns_and_ratio():
    rows = _fake_rows()
    report.finalize(rows, {"fp16": 700.0, "bf16": 750.0})
    fc, fl, cu, ef, d_fc, d_cu = rows
    assert fc.us_best == 8.0 and fc.us_per_seq == 1.0 and fc.us_per_head == pytest.approx(8.0 / 128)
    # fastest working competitor is cuDNN at 10 us (the 5 us WRONG row must not count)
    assert fc.best_competitor == "sdpa-cudnn"
    assert fc.speedup == pytest.approx(10.0 / 8.0)
    assert fl.speedup is None and cu.speedup is None
    assert fc.tflops == pytest.approx(suites.attention_flops(fc.shape) / 8e-6 / 1e12)
    assert fc.pct_ceiling == pytest.approx(100 * fc.tflops / 700.0)
    assert d_fc.speedup is None and d_fc.us_best is None
    assert d_cu.gbps == pytest.approx(suites.io_bytes(d_cu.shape) / 10e-6 / 1e9)


def _decode_family_rows():
    """A decode shape with every flashcore row (flashcore-kv the fastest of
    all) and the SDPA rows, plus a seeds shape with flashcore only."""
    dshape = suites.Shape("decode", 16, 32, 8, 1, 32768, 128, False, "bf16")
    mk = report.Row.for_shape
    times = {"flashcore": (900.0, 800.0), "flashcore-kv": (760.0, 700.0), "flashcore-paged": (820.0, 780.0),
             "sdpa-flash": (1300.0, 1200.0), "sdpa-cudnn": (1000.0, 1100.0), "sdpa-efficient": (3000.0, 2900.0)}
    rows = []
    for be, (eager, graph) in times.items():
        r = mk(dshape, be)
        r.us_eager, r.us_graph = eager, graph
        rows.append(r)
    rows[-1].status, rows[-1].reason = report.STATUS_SKIP, "enable_gqa refused"
    sshape = suites.Shape("seeds", 1, 16, 16, 128, 128, 64, False, "fp16")
    s_fc = mk(sshape, "flashcore"); s_fc.us_eager = 4.0
    s_fl = mk(sshape, "sdpa-flash"); s_fl.us_eager = 6.0
    return rows + [s_fc, s_fl]


def test_finalize_flashcore_family_against_sdpa_only():
    rows = _decode_family_rows()
    report.finalize(rows, {"bf16": 750.0})
    by = {(r.suite, r.backend): r for r in rows}
    # best SDPA: sdpa-cudnn eager 1000 us (its best of eager/graph); the skipped
    # efficient row and the faster flashcore rows never count as competitors
    for be, us in (("flashcore", 800.0), ("flashcore-kv", 700.0), ("flashcore-paged", 780.0)):
        r = by[("decode", be)]
        assert r.best_competitor == "sdpa-cudnn" and r.speedup == pytest.approx(1000.0 / us), be
        # GB/s counts the same bytes on every row of the shape
        assert r.gbps == pytest.approx(suites.io_bytes(r.shape) / (us * 1e-6) / 1e9)
    for be in ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient"):
        assert by[("decode", be)].speedup is None and by[("decode", be)].best_competitor == ""
    assert by[("seeds", "flashcore")].speedup == pytest.approx(1.5)
    assert report.is_flashcore("flashcore-paged") and not report.is_flashcore("sdpa-flash")


def test_summary_lists_every_flashcore_row_of_a_shape():
    rows = _decode_family_rows()
    report.finalize(rows, {"bf16": 750.0})
    body = report.summary_rows(rows)
    col = {h: i for i, h in enumerate(report.SUMMARY_HEADERS)}
    assert [(line[col["suite"]], line[col["backend"]]) for line in body] == [
        ("decode", "flashcore"), ("decode", "flashcore-kv"), ("decode", "flashcore-paged"), ("seeds", "flashcore")]
    kv = body[1]
    assert kv[col["shape"]] == "B16 H32/8 Sq1 Sk32768 D128 full"
    assert (kv[col["us"]], kv[col["best other"]], kv[col["its us"]], kv[col["speedup"]], kv[col["status"]]) == \
        ("700.00", "sdpa-cudnn", "1000.00", "1.43x", "ok")
    assert [line[col["speedup"]] for line in body] == ["1.25x", "1.43x", "1.28x", "1.50x"]
    table = report.summary_table(rows)
    assert len(table.splitlines()) == 2 + 4
    md = report.markdown_report(rows, ["gpu: FAKE"], ["matmul: 1"], ["seeds", "decode"])
    assert "| decode | B16 H32/8 Sq1 Sk32768 D128 full | flashcore-paged | 780.00 | sdpa-cudnn | 1000.00 | 1.28x |" in md
    # a shape without any flashcore row still gets its one 'not run' line
    only_sdpa = [r for r in rows if not report.is_flashcore(r.backend)]
    body = report.summary_rows(only_sdpa)
    assert [(line[col["backend"]], line[col["status"]]) for line in body] == [
        ("flashcore", "not run"), ("flashcore", "not run")]


def test_csv_writer_columns(tmp_path):
    rows = _fake_rows()
    report.finalize(rows, {"fp16": 700.0})
    path = tmp_path / "results.csv"
    report.write_csv(path, rows, ["gpu: FAKE", "command: python -m flashcore.bench --quick"])
    text = path.read_text().splitlines()
    assert text[0] == "# gpu: FAKE" and text[1].startswith("# command:")
    body = [l for l in text if not l.startswith("#")]
    recs = list(csv.DictReader(body))
    required = {"suite", "backend", "dtype", "B", "H", "Hkv", "Sq", "Sk", "D", "causal", "us_eager",
                "us_graph", "us_p10", "us_p90", "tflops", "pct_ceiling", "gbps", "relerr", "status", "reason"}
    assert required <= set(recs[0])
    assert len(recs) == len(rows)
    assert recs[0]["backend"] == "flashcore" and recs[0]["causal"] == "0"
    assert float(recs[0]["us_graph"]) == 8.0 and float(recs[0]["speedup"]) == pytest.approx(1.25)
    assert recs[3]["status"] == "WRONG" and recs[3]["us_graph"] == ""
    assert recs[4]["reason"] == "NotImplementedError: decode"
    d = recs[5]
    assert (d["H"], d["Hkv"], d["Sq"], d["Sk"]) == ("32", "8", "1", "4096")


def test_markdown_and_tables():
    rows = _fake_rows()
    report.finalize(rows, {"fp16": 700.0})
    md = report.markdown_report(rows, ["gpu: FAKE"], ["matmul: 1"], ["seeds", "decode"])
    assert "## Summary" in md and "## Suite `seeds`" in md and "## Suite `decode`" in md
    header_lines = [l for l in md.splitlines() if l.startswith("| backend |")]
    assert len(header_lines) == 2
    assert "| " + " | ".join(report.SUMMARY_HEADERS) + " |" in md
    assert "1.25x" in md
    table = report.suite_table([r for r in rows if r.suite == "seeds"])
    assert "sdpa-cudnn" in table and "WRONG" in table and "1.25x" in table
    summ = report.summary_table(rows)
    lines = summ.splitlines()
    assert len(lines) == 2 + 2  # header, rule, one line per shape
    assert "1.25x" in lines[2] and "sdpa-cudnn" in lines[2]
    assert "skip: NotImplementedError" in lines[3]


def test_plots_written(tmp_path):
    pytest.importorskip("matplotlib")
    rows = _fake_rows()
    fa3 = suites.fa3_shapes(quick=True)
    for i, s in enumerate(fa3):
        for be in ("flashcore", "sdpa-cudnn"):
            r = report.Row.for_shape(s, be)
            r.us_eager = 1000.0 + 100 * i
            rows.append(r)
    rows.append(report.Row.for_shape(suites.parse_shape("1,2,64,32"), "sdpa-flash"))
    rows[-1].us_eager = 3.0
    rows += _decode_family_rows()  # flashcore-kv / -paged: extra decode series
    report.finalize(rows, {"bf16": 750.0, "fp16": 700.0})
    paths = bench.plot.plot_all(rows, str(tmp_path), {"bf16": 750.0}, 3000.0)
    assert sorted(os.path.basename(p) for p in paths) == ["custom.png", "decode.png", "fa3.png", "seeds.png"]
    assert all(os.path.getsize(p) > 1000 for p in paths)


# ------------------------------------------------------------------ runner control flow

class _FakePrepared:
    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.note = ""
        self.calls = 0

    def context(self):
        import contextlib
        return contextlib.nullcontext()

    def check_call(self):
        if self.behaviour == "refuse":
            import warnings
            warnings.warn("Flash attention requires head_dim <= 256")
            raise RuntimeError("No available kernel. Aborting execution.")
        return self.behaviour  # the fake check below reads this as the "output"

    def call(self, i):
        self.calls += 1


class _FakeBackend(backends.Backend):
    def __init__(self, name, behaviour, suites=None):
        self.name = name
        self.behaviour = behaviour
        self.suites = suites
        self.prepared = []

    def prepare(self, shape, inputs):
        if self.behaviour == "unavailable":
            raise backends.Unavailable("flashcore is not importable")
        p = _FakePrepared(self.behaviour)
        self.prepared.append(p)
        return p


class _CheckResult:
    def __init__(self, ok):
        self.ok, self.relerr, self.detail = ok, (1e-3 if ok else 0.5), "fake detail"


def _fake_runner(bes, timed, crash_on=None, sync_fails_after_crash=True):
    state = {"dead": False}

    def eager_samples(call, n_sets, trials, warmup, start):
        call(0)
        if crash_on is not None and crash_on[0] is timed.get("current"):
            state["dead"] = sync_fails_after_crash
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return [10.0, 11.0, 12.0]

    def graph_timer(call, n_sets, calls):
        return _FakeGraphTimer()

    def sync():
        if state["dead"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    class Inputs:
        q = k = v = [None]

    r = runner_mod.Runner(bes, runner_mod.RunOptions(trials=3), None,
                          make_inputs=lambda shape, n, seed: Inputs(),
                          check=lambda shape, q, k, v, out: _CheckResult(out != "wrong"),
                          eager_samples=eager_samples, graph_timer=graph_timer,
                          synchronize=sync, cleanup=lambda: None)
    return r


class _FakeGraphTimer:
    def __init__(self, fail_on_chunk=None):
        self.chunks, self.closed, self.fail_on_chunk = [], False, fail_on_chunk

    def samples(self, n, warmup=0):
        assert not self.closed
        self.chunks.append((n, warmup))
        if len(self.chunks) == self.fail_on_chunk:
            raise RuntimeError("operation not permitted when stream is capturing")
        return [5.0, 5.0, 6.0]

    def close(self):
        self.closed = True


def test_runner_statuses():
    bes = [_FakeBackend("flashcore", "unavailable"), _FakeBackend("sdpa-flash", "refuse"),
           _FakeBackend("sdpa-cudnn", "ok"), _FakeBackend("sdpa-efficient", "wrong")]
    r = _fake_runner(bes, {})
    shapes = suites.seeds_shapes(quick=True)[:2]
    rows = r.run(shapes)
    assert len(rows) == len(shapes) * len(bes)  # one row per backend x shape, none dropped
    by = {(row.backend, row.B, row.Sq): row for row in rows}
    s0 = shapes[0]
    fc = by[("flashcore", s0.B, s0.Sq)]
    assert fc.status == "n/a" and "not importable" in fc.reason
    fl = by[("sdpa-flash", s0.B, s0.Sq)]
    assert fl.status == "skip" and "No available kernel" in fl.reason and "head_dim <= 256" in fl.reason
    cu = by[("sdpa-cudnn", s0.B, s0.Sq)]
    assert cu.status == "ok" and cu.us_eager == 11.0 and cu.us_graph == 5.0 and cu.relerr == 1e-3
    ef = by[("sdpa-efficient", s0.B, s0.Sq)]
    assert ef.status == "WRONG" and ef.us_eager is None and ef.relerr == 0.5
    # a WRONG contender is never timed
    assert all(p.calls == 0 for p in bes[3].prepared)


def test_runner_no_graph_and_large_shapes():
    bes = [_FakeBackend("sdpa-cudnn", "ok")]
    r = _fake_runner(bes, {})
    r.opts.graph = False
    rows = r.run(suites.seeds_shapes(quick=True)[:1])
    assert rows[0].us_graph is None and rows[0].status == "ok"
    r = _fake_runner(bes, {})
    big = suites.Shape("fa3", 1, 16, 16, 16384, 16384, 128, False, "bf16")
    r.eager_samples = lambda call, n, t, w, s: [3000.0]
    rows = r.run([big])
    assert rows[0].us_graph is None and rows[0].us_eager == 3000.0 and rows[0].rot_sets == 1


def test_runner_graph_policy_is_per_shape_and_order_kept():
    # On a fa3 cell, one contender under the 200 us threshold puts every
    # contender of that shape in graph mode; rows stay in backend order.
    bes = [_FakeBackend("flashcore", "wrong"), _FakeBackend("sdpa-flash", "ok"),
           _FakeBackend("sdpa-cudnn", "ok")]
    r = _fake_runner(bes, {})
    r.eager_samples = lambda call, n, t, w, s: [250.0 if call.__self__ in bes[1].prepared else 150.0]
    rows = r.run([suites.fa3_shapes()[0]])
    assert [row.backend for row in rows] == ["flashcore", "sdpa-flash", "sdpa-cudnn"]
    assert rows[0].status == "WRONG" and rows[0].us_graph is None
    assert rows[1].us_eager == 250.0 and rows[1].us_graph == 5.0
    assert rows[2].us_eager == 150.0 and rows[2].us_graph == 5.0
    # ... and none of them when every eager time is above it
    r = _fake_runner(bes, {})
    r.eager_samples = lambda call, n, t, w, s: [900.0]
    rows = r.run([suites.fa3_shapes()[0]])
    assert all(row.us_graph is None for row in rows)


def test_runner_runs_kv_contenders_on_decode_only():
    # The real flashcore-kv / flashcore-paged backends (flashcore not loaded:
    # n/a rows) next to fakes: no row at all, not even n/a, off decode.
    real = backends.make_backends(["flashcore-kv", "flashcore-paged"], None, "not built here")
    bes = [_FakeBackend("flashcore", "ok")] + real + [_FakeBackend("sdpa-cudnn", "ok")]
    r = _fake_runner(bes, {})
    seeds, fa3, decode = suites.seeds_shapes()[0], suites.fa3_shapes()[0], suites.decode_shapes()[0]
    rows = r.run([seeds, fa3, decode])
    assert [(row.suite, row.backend) for row in rows] == [
        ("seeds", "flashcore"), ("seeds", "sdpa-cudnn"),
        ("fa3", "flashcore"), ("fa3", "sdpa-cudnn"),
        ("decode", "flashcore"), ("decode", "flashcore-kv"), ("decode", "flashcore-paged"), ("decode", "sdpa-cudnn")]
    kv, paged = rows[5], rows[6]
    assert kv.status == paged.status == "n/a" and kv.reason == "Unavailable: not built here"
    # fakes restricted the same way behave the same: timed, eager and graph
    bes = [_FakeBackend("flashcore", "ok"), _FakeBackend("flashcore-kv", "ok", ("decode",)),
           _FakeBackend("sdpa-cudnn", "ok")]
    rows = _fake_runner(bes, {}).run([seeds, decode])
    assert [row.backend for row in rows] == ["flashcore", "sdpa-cudnn", "flashcore", "flashcore-kv", "sdpa-cudnn"]
    assert rows[3].status == "ok" and rows[3].us_eager == 11.0 and rows[3].us_graph == 5.0
    assert len(bes[1].prepared) == 1  # prepared once, for the decode shape only
    # a CUDA fault before decode: the "not run" rows follow the same rule
    r = _fake_runner(bes, {})
    r.dead = "illegal address"
    rows = r.run([seeds, decode])
    assert [row.backend for row in rows] == ["flashcore", "sdpa-cudnn", "flashcore", "flashcore-kv", "sdpa-cudnn"]
    assert all("CUDA context lost" in row.reason for row in rows)


class _FakeFlashcore:
    def attention(self, *a, **k):  # pragma: no cover - never called
        raise AssertionError


def test_kv_backend_refusals_without_torch():
    decode = suites.decode_shapes()[0]
    odd = dataclasses.replace(decode, Sk=4000)
    kv, paged = backends.make_backends(["flashcore-kv", "flashcore-paged"], _FakeFlashcore())
    # no attention_with_kvcache in this flashcore: the contender cannot run at all
    with pytest.raises(backends.Unavailable) as e:
        kv.prepare(decode, None)
    assert backends.classify_failure(kv.name, e.value) == (
        "n/a", "Unavailable: flashcore.attention_with_kvcache is not available")
    fc = _FakeFlashcore()
    fc.attention_with_kvcache = lambda *a, **k: None
    paged = backends.FlashcoreKvBackend(fc, paged=True)
    assert paged.name == "flashcore-paged"
    with pytest.raises(backends.Refused) as e:
        paged.prepare(odd, None)
    assert backends.classify_failure(paged.name, e.value) == (
        "skip", "paged cache: Sk=4000 is not a multiple of the page size 64")
    # the same refusal through the runner is a skip row with that reason
    r = _fake_runner([paged], {})
    rows = r.run([odd])
    assert (rows[0].status, rows[0].reason) == ("skip", "paged cache: Sk=4000 is not a multiple of the page size 64")


def test_page_pool_and_kv_contenders_on_the_cpu_backend():
    """The real flashcore-kv / flashcore-paged contenders on CPU tensors
    (flashcore's CPU reference backend): the pool holds the cache page for
    page as the block table says, the table is shuffled, and both return the
    float64 attention of the shape's own q, k, v (set 0 through check_call,
    set 1 through call)."""
    torch = pytest.importorskip("torch")
    fc, why = backends.load_flashcore()
    if fc is None or not callable(getattr(fc, "attention_with_kvcache", None)):
        pytest.skip(f"flashcore.attention_with_kvcache not importable: {why}")
    shape = suites.Shape("decode", 3, 8, 2, 1, 256, 64, False, "fp32")
    gen = torch.Generator().manual_seed(0)

    class CpuInputs:
        n_sets = 2
        q = [torch.randn(3, 8, 1, 64, generator=gen) for _ in range(2)]
        k = [torch.randn(3, 2, 256, 64, generator=gen) for _ in range(2)]
        v = [torch.randn(3, 2, 256, 64, generator=gen) for _ in range(2)]
        out = [torch.empty(3, 8, 1, 64) for _ in range(2)]

    x = CpuInputs()
    table, perm = backends.page_table(3, 4, "cpu")
    assert table.dtype == torch.int32 and tuple(table.shape) == (3, 4)
    assert sorted(table.flatten().tolist()) == list(range(12)) and table.flatten().tolist() != list(range(12))
    pool = backends.to_page_pool(x.k[0], perm)
    assert tuple(pool.shape) == (12, 2, 64, 64)  # (num_pages, Hkv, page_size, D) for layout "bhsd"
    for b in range(3):
        for j in (0, 63, 64, 130, 255):
            assert torch.equal(pool[table[b, j // 64], :, j % 64], x.k[0][b, :, j])

    def reference(i):
        k = x.k[i].double().repeat_interleave(4, dim=1)
        v = x.v[i].double().repeat_interleave(4, dim=1)
        p = torch.softmax(x.q[i].double() @ k.transpose(-1, -2) / 8.0, dim=-1)
        return p @ v

    for be in backends.make_backends(["flashcore-kv", "flashcore-paged"], fc):
        prepared = be.prepare(shape, x)
        got = prepared.check_call()
        assert got is x.out[0] and prepared.note == "" and not prepared.check_metadata
        assert torch.allclose(got.double(), reference(0), atol=1e-4), be.name
        prepared.call(1)
        assert torch.allclose(x.out[1].double(), reference(1), atol=1e-4), be.name
        assert (prepared.block_table is None) == (be.name == "flashcore-kv")
        assert prepared.cache_seqlens.tolist() == [256] * 3


def test_runner_cuda_fault_stops_cleanly():
    crasher = _FakeBackend("flashcore", "ok")
    bes = [crasher, _FakeBackend("sdpa-cudnn", "ok")]
    timed = {}
    r = _fake_runner(bes, timed, crash_on=(None,))
    timed["current"] = None  # crash on the first eager timing
    shapes = suites.seeds_shapes(quick=True)[:2]
    rows = r.run(shapes)
    assert len(rows) == 4
    assert rows[0].status == "error" and "illegal memory access" in rows[0].reason
    assert r.dead
    assert all(row.status == "error" and "CUDA context lost" in row.reason for row in rows[1:])


def test_runner_fault_in_a_later_check_leaves_no_untimed_ok_row():
    """A contender whose check takes the CUDA context down: those checked
    before it are not timed (timing comes after every check) and say so."""
    class _Crash(_FakeBackend):
        def prepare(self, shape, inputs):
            p = super().prepare(shape, inputs)
            def boom():
                state["dead"] = True
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            p.check_call = boom
            return p

    state = {"dead": False}
    bes = [_FakeBackend("sdpa-cudnn", "ok"), _Crash("flashcore", "ok")]
    r = _fake_runner(bes, {})
    r.synchronize = lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: illegal")) if state["dead"] else None
    rows = r.run(suites.seeds_shapes(quick=True)[:1])
    assert rows[0].backend == "sdpa-cudnn" and rows[0].status == "error" and "not timed" in rows[0].reason
    assert rows[1].status == "error" and rows[0].us_eager is None and r.dead


def test_round_order_is_a_williams_design():
    """Every round a permutation; over one cycle of rounds (n, or 2n for odd
    n) each contender is first equally often and directly follows each other
    one equally often."""
    import collections
    for n in range(1, 8):
        cycle = n if n % 2 == 0 else 2 * n
        rows = [runner_mod.round_order(n, r) for r in range(cycle)]
        assert all(sorted(row) == list(range(n)) for row in rows)
        assert rows == [runner_mod.round_order(n, r + cycle) for r in range(cycle)]
        if n == 1:
            continue
        firsts = collections.Counter(row[0] for row in rows)
        assert set(firsts.values()) == {cycle // n}
        follows = collections.Counter((a, b) for row in rows for a, b in zip(row, row[1:]))
        assert len(follows) == n * (n - 1) and set(follows.values()) == {cycle // n}, (n, follows)


def test_split_trials():
    assert runner_mod.split_trials(200, 10) == [20] * 10
    assert runner_mod.split_trials(3, 10) == [1, 1, 1]
    assert runner_mod.split_trials(25, 10) == [3] * 5 + [2] * 5
    assert runner_mod.split_trials(7, 1) == [7]
    assert runner_mod.split_trials(0, 10) == []


def test_runner_interleaves_contenders_in_rounds():
    """Each contender's 200 calls in 10 chunks of 20, the contenders taking
    turns (round_order), full warm-up before a contender's
    first chunk and 2 calls before each later one, and one running rotation
    position across everything timed; medians over all chunks."""
    bes = [_FakeBackend(n, "ok") for n in ("flashcore", "sdpa-flash", "sdpa-cudnn")]
    chunks = []

    def eager_samples(call, n_sets, trials, warmup, start):
        name = next(be.name for be in bes if call.__self__ in be.prepared)
        chunks.append((name, trials, warmup, start))
        base = {"flashcore": 100.0, "sdpa-flash": 200.0, "sdpa-cudnn": 300.0}[name]
        return [base + len(chunks) + i for i in range(trials)]

    r = _fake_runner(bes, {})
    r.eager_samples = eager_samples
    r.opts.trials, r.opts.graph = 200, False
    big = suites.Shape("fa3", 1, 16, 16, 16384, 16384, 128, False, "bf16")
    rows = r.run([big])
    assert len(chunks) == 30
    names = [c[0] for c in chunks]
    order = ["flashcore", "sdpa-flash", "sdpa-cudnn"]
    for rnd in range(10):
        assert names[3 * rnd:3 * rnd + 3] == [order[i] for i in runner_mod.round_order(3, rnd)]
    assert all(c[1] == 20 for c in chunks)
    assert [c[2] for c in chunks] == [10] * 3 + [2] * 27
    pos = 0
    for _, n, warm, start in chunks:
        assert start == pos
        pos += warm + n
    for row, base in zip(rows, (100.0, 200.0, 300.0)):
        mine = sorted(base + k + 1 + i for k, c in enumerate(chunks) if c[0] == row.backend for i in range(20))
        assert row.trials == 200 and row.us_eager == pytest.approx(timing.percentile(mine, 50))
        assert row.us_p90 == pytest.approx(timing.percentile(mine, 90))


def test_runner_interleaved_failures_stay_with_their_contender():
    """An eager failure that leaves the device healthy drops only that
    contender; a failed graph replay keeps the eager numbers and closes every
    graph."""
    bes = [_FakeBackend(n, "ok") for n in ("flashcore", "sdpa-flash", "sdpa-cudnn")]
    count = {"flashcore": 0}

    def eager_samples(call, n_sets, trials, warmup, start):
        if call.__self__ in bes[0].prepared:
            count["flashcore"] += 1
            if count["flashcore"] == 4:
                raise ValueError("out of memory in chunk 4")
        return [150.0]

    timers = []

    def graph_timer(call, n_sets, calls):
        timers.append(_FakeGraphTimer(fail_on_chunk=3 if call.__self__ in bes[2].prepared else None))
        return timers[-1]

    r = _fake_runner(bes, {})
    r.eager_samples, r.graph_timer = eager_samples, graph_timer
    r.opts.trials, r.opts.graph_replays = 200, 50
    rows = r.run([suites.fa3_shapes()[0]])
    assert rows[0].status == "error" and "eager timing" in rows[0].reason and "chunk 4" in rows[0].reason
    assert count["flashcore"] == 4 and not r.dead
    assert rows[1].status == "ok" and rows[1].us_eager == 150.0 and rows[1].trials == 10
    assert rows[1].us_graph == 5.0 and rows[1].graph_calls is not None
    assert rows[2].status == "ok" and rows[2].us_eager == 150.0 and rows[2].us_graph is None
    assert "graph capture/replay failed" in rows[2].reason
    assert len(timers) == 2 and all(t.closed for t in timers)
    assert timers[0].chunks == [(5, 1)] * 10 and len(timers[1].chunks) == 3


def test_classify_failure():
    assert backends.classify_failure("flashcore", NotImplementedError("hdim 96"))[0] == "skip"
    assert backends.classify_failure("flashcore", TypeError("bad dtype"))[0] == "skip"
    assert backends.classify_failure("flashcore", RuntimeError("not supported: D=512"))[0] == "skip"
    status, reason = backends.classify_failure(
        "flashcore", RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert status == "error" and reason.startswith("RuntimeError: CUDA error")
    assert backends.classify_failure("x", backends.Unavailable("no"))[0] == "n/a"
    long = backends.summarize_exception(RuntimeError("x" * 1000), limit=50)
    assert len(long) == 50 and long.endswith("...")


# ------------------------------------------------------------------ CLI / no-GPU path

def test_cli_rejects_bad_arguments():
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--suite", "bogus"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        cli.parse_args(["--shape", "1,2,3"])
    args = cli.parse_args(["--suite", "fa3,decode", "--quick", "--backends", "cudnn", "--no-graph"])
    assert args.suites == ["fa3", "decode"] and args.quick and args.no_graph
    assert args.backend_names == ["sdpa-cudnn"] and args.trials == 200 and args.rounds == 10
    with pytest.raises(SystemExit):
        cli.parse_args(["--rounds", "0"])
    assert cli.parse_args(["--rounds", "1"]).rounds == 1
    assert "--rounds" in cli.build_parser().format_help()


def test_cli_refuses_a_run_without_rows(capsys):
    # flashcore-kv alone on the seeds suite would produce no row at all; this
    # is decided before anything touches the GPU.
    args = cli.parse_args(["--suite", "seeds", "--backends", "fc-kv,fc-paged"])
    assert args.backend_names == ["flashcore-kv", "flashcore-paged"]
    assert cli.gpu_main(args, []) == 2
    assert "decode suite only" in capsys.readouterr().err


def test_default_out_dir(monkeypatch):
    monkeypatch.setenv("OUT", "/tmp/somewhere")
    assert bench.env.default_out_dir() == "/tmp/somewhere"
    monkeypatch.delenv("OUT")
    d = bench.env.default_out_dir()
    assert d.startswith(os.path.join("bench", "results")) and len(os.path.basename(d)) == 10


def test_no_gpu_prints_one_line_then_demo(monkeypatch, capsys):
    monkeypatch.setattr(bench.env, "cuda_available", lambda: (False, "monkeypatched: no CUDA"))
    monkeypatch.setattr(bench.cpu_demo, "DEMO_SHAPE", (1, 2, 64, 64))  # small, fast; D=64 is supported everywhere
    rc = cli.main([])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == ("flashcore-bench: no CUDA device found; running the CPU reference demo instead "
                        "(no GPU numbers are printed)")
    assert out.count("no CUDA device found") == 1
    for gpu_word in ("TFLOP/s", "GB/s", "us eager", "us graph"):
        assert gpu_word not in out
    if not _flashcore_works():
        # flashcore's compiled module is not built here: the demo must say so
        # and fail, not pretend.
        assert rc == 2
        assert "cannot import flashcore" in out
        pytest.skip("flashcore's compiled module is not importable: demo part not checked")
    assert rc == 0, out
    assert out.count("PASS") >= 2  # fp16 and fp32, at least the non-causal cases
    assert "FAIL" not in out


def test_cpu_demo_reference_matches_loops():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 3, 4))
    k = rng.standard_normal((1, 2, 5, 4))
    v = rng.standard_normal((1, 2, 5, 4))
    got = bench.cpu_demo.numpy_reference(q, k, v, causal=True)
    for h in range(2):
        for i in range(3):
            lim = i + (5 - 3)  # bottom-right aligned
            s = np.array([q[0, h, i] @ k[0, h, j] / 2.0 for j in range(lim + 1)])
            p = np.exp(s - s.max()); p /= p.sum()
            assert np.allclose(got[0, h, i], p @ v[0, h, :lim + 1])
    full = bench.cpu_demo.numpy_reference(q, k, v, causal=False)
    assert not np.allclose(full, got)
    assert math.isfinite(float(full.sum()))


def test_progress_counter_without_tqdm():
    buf = io.StringIO()
    p = bench.progress.Progress(2, stream=buf, use_tqdm=False)
    p.set_label("sdpa-cudnn B1 H16 S128 D64 full")
    p.update()
    p.write("a message")
    p.update()
    p.close()
    assert buf.getvalue().splitlines() == ["[1/2] sdpa-cudnn B1 H16 S128 D64 full", "a message",
                                           "[2/2] sdpa-cudnn B1 H16 S128 D64 full"]
