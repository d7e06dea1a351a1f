"""python -m flashcore.bench: flashcore against PyTorch SDPA on the same GPU,
same process, same input tensors.

    python -m flashcore.bench                       # all suites
    python -m flashcore.bench --quick               # a subset, under a minute
    python -m flashcore.bench --suite fa3 --backends flashcore,cudnn
    python -m flashcore.bench --shape 4,16,2048,128,causal --dtype bf16
    python -m flashcore.bench --suite decode --backends fc,fc-kv,fc-paged,sdpa

Without a CUDA device it says so in one line and runs a CPU demo instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from . import env, suites
from .backends import ALL_BACKENDS, parse_backends

NO_GPU_LINE = ("flashcore-bench: no CUDA device found; running the CPU reference demo instead "
               "(no GPU numbers are printed)")

METRIC_NOTES = [
    "us_eager: median of per-call CUDA event pairs (host dispatch gaps included); us_p10/us_p90: its spread",
    "us_graph: calls captured in one CUDA graph (graph_calls), replays timed with events, median per call",
    "rot_sets: input sets rotated so the working set exceeds 2x L2 (no L2-resident timing)",
    "tflops = 4*B*H*Sq*Sk*D / us_best (halved when causal and Sq == Sk); us_best = min(us_eager, us_graph)",
    "gbps = bytes of q, k, v and out / us_best; pct_ceiling = tflops / measured matmul TFLOP/s of the dtype",
    "relerr = ||out - ref||_F / ||ref||_F against float64 on sampled (batch, head) pairs and query rows",
    "flashcore-kv / flashcore-paged (decode suite only): flashcore.attention_with_kvcache(layout='bhsd', check=False) "
    "on the same K/V as a contiguous cache (capacity = Sk, cache_seqlens = Sk) / copied into a pool of "
    "64-token pages behind a seeded random block table (built outside timing); gbps counts the same bytes as flashcore",
    "speedup (rows flashcore, flashcore-kv, flashcore-paged) = fastest working SDPA row's us_best / that row's us_best; "
    "> 1 means flashcore is faster",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flashcore.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="all",
                   help=f"comma-separated suites from {','.join(suites.SUITES)} (default: all)")
    p.add_argument("--quick", action="store_true", help="a small subset of every chosen suite (under a minute)")
    p.add_argument("--shape", action="append", default=[], metavar="B,H,S,D[,causal]",
                   help="one-off shape instead of the suites (repeatable); dtype from --dtype")
    p.add_argument("--dtype", default="bf16", help="dtype of --shape runs: bf16 (default), fp16, fp32")
    p.add_argument("--out", default=None, help="output directory (default: $OUT if set, else bench/results/<date>/)")
    p.add_argument("--trials", type=int, default=200, help="timed eager calls per backend x shape (default 200)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before timing (default 10)")
    p.add_argument("--replays", type=int, default=50, help="timed graph replays (default 50)")
    p.add_argument("--rounds", type=int, default=10,
                   help="rounds the timed calls (and replays) of a shape are split into, the contenders taking "
                        "turns in each (default 10; 1: each contender's calls in one block, which favours the "
                        "first one timed after the checks: about 1.5%% on the FA3 grid, BENCHMARKS.md)")
    p.add_argument("--no-graph", action="store_true", help="skip CUDA-graph timing")
    p.add_argument("--backends", default="all",
                   help=f"comma-separated subset of {','.join(ALL_BACKENDS)} (default: all; aliases: fc, "
                        "fc-kv, fc-paged, flash, cudnn, efficient, sdpa); flashcore-kv and flashcore-paged "
                        "run on the decode suite only")
    p.add_argument("--no-plot", action="store_true", help="do not write PNG plots")
    return p


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        args.suites = suites.parse_suites(args.suite)
        args.dtype = suites.normalize_dtype(args.dtype)
        args.custom = [suites.parse_shape(s, args.dtype) for s in args.shape]
        args.backend_names = parse_backends(args.backends)
    except ValueError as exc:
        p.error(str(exc))
    if args.trials < 1 or args.replays < 1 or args.warmup < 0 or args.rounds < 1:
        p.error("--trials, --replays and --rounds must be >= 1, --warmup >= 0")
    if args.trials < 200:
        print(f"flashcore-bench: note: --trials {args.trials} is below the 200 the method calls for",
              file=sys.stderr)
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    has_gpu, _why = env.cuda_available()
    if not has_gpu:
        print(NO_GPU_LINE, flush=True)
        from .cpu_demo import run_cpu_demo

        return run_cpu_demo(sys.stdout)
    return gpu_main(args, argv)


def gpu_main(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    from . import plot, report
    from .backends import applicable, flashcore_cuda_problem, flashcore_version, load_flashcore, make_backends
    from .progress import Progress
    from .runner import Runner, RunOptions
    from .timing import measure_ceilings, measure_matmul

    fc, fc_reason = load_flashcore()
    fc_problem = fc_reason or flashcore_cuda_problem(fc)
    shapes = suites.build_shapes(args.suites, args.quick, args.custom)
    shown_suites = ["custom"] if args.custom else list(args.suites)
    backends = make_backends(args.backend_names, fc, fc_problem)
    # flashcore-kv / flashcore-paged run on decode shapes only: count the rows.
    n_runs = sum(len(applicable(backends, s)) for s in shapes)
    if n_runs == 0:
        print(f"flashcore-bench: none of the backends {','.join(args.backend_names)} runs on the chosen "
              "shapes (flashcore-kv and flashcore-paged: decode suite only)", file=sys.stderr)
        return 2

    out_dir = args.out or env.default_out_dir()
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "results.csv")
    md_path = os.path.join(out_dir, "summary.md")

    env_lines = env.gpu_environment(flashcore_version(fc), argv)
    for line in env_lines:
        print(line)
    if fc_problem and any(report.is_flashcore(n) for n in args.backend_names):
        print(f"flashcore rows will be n/a: {fc_problem}")
    print(f"{len(shapes)} shapes, {n_runs} backend x shape runs -> {out_dir}", flush=True)

    # Ceilings first, in the same process and thermal state as the contenders.
    dtypes = ["bf16"] + sorted({s.dtype for s in shapes} - {"bf16"})
    print("measuring ceilings (matmul, copy, trivial-kernel launch)...", flush=True)
    ceilings = measure_ceilings(dtypes, log=lambda msg: print("  " + msg, flush=True))
    progress = Progress(n_runs, desc="flashcore-bench")

    def ceiling_lines() -> List[str]:
        out = []
        for dt, v in ceilings.matmul_tflops.items():
            end = ceilings.matmul_tflops_end.get(dt)
            out.append(f"matmul 8192^3 {dt}: {v:.1f} TFLOP/s" + (f" (re-measured at the end: {end:.1f})" if end else ""))
        if ceilings.copy_gbps:
            out.append(f"d2d copy 1 GiB: {ceilings.copy_gbps:.0f} GB/s (read + write)")
        if ceilings.tiny_eager_us is not None:
            out.append(f"trivial kernel: eager {ceilings.tiny_eager_us:.2f} us, in a graph {ceilings.tiny_graph_us:.2f} us")
        out += [f"ceiling not measured: {e}" for e in ceilings.errors]
        return out

    def write_outputs(rows, final: bool) -> None:
        report.finalize(rows, ceilings.matmul_tflops)
        header = env_lines + ceiling_lines() + METRIC_NOTES + [
            f"rounds={args.rounds}: a shape's timed calls (and graph replays) are split into that many rounds, "
            "the contenders taking turns in each (orders from a Williams design), medians over all rounds"]
        if not final:
            header = header + ["PARTIAL: run still in progress or interrupted"]
        report.write_csv(csv_path, rows, header)

    runner = Runner(backends, RunOptions(trials=args.trials, warmup=args.warmup, graph=not args.no_graph,
                                         graph_replays=args.replays, rounds=args.rounds,
                                         l2_bytes=env.l2_bytes()),
                    progress, on_shape_done=lambda rows: write_outputs(rows, final=False))
    interrupted = False
    try:
        rows = runner.run(shapes)
    except KeyboardInterrupt:
        interrupted = True
        rows = runner.rows
        progress.write("interrupted: writing what was measured so far")
    progress.close()

    if not interrupted and runner.dead is None:
        try:
            ceilings.matmul_tflops_end["bf16"] = measure_matmul("bf16")
        except Exception as exc:  # noqa: BLE001
            ceilings.errors.append(f"end matmul: {type(exc).__name__}: {exc}")

    write_outputs(rows, final=not interrupted)
    with open(md_path, "w") as f:
        f.write(report.markdown_report(rows, env_lines, ceiling_lines(), shown_suites))
    written = [csv_path, md_path]
    if not args.no_plot:
        try:
            written += plot.plot_all(rows, out_dir, ceilings.matmul_tflops, ceilings.copy_gbps)
        except Exception as exc:  # noqa: BLE001 - plots are a convenience, numbers are not lost
            print(f"plots not written: {type(exc).__name__}: {exc}")

    for suite in shown_suites:
        srows = [r for r in rows if r.suite == suite]
        if srows:
            print(f"\n== suite {suite} ==")
            print(report.suite_table(srows))
    print()
    for line in ceiling_lines():
        print(line)
    print("wrote: " + ", ".join(written))
    if runner.dead:
        print(f"CUDA context lost during the run: {runner.dead}")
    # The remote runner shows only the tail of the output: the summary goes last.
    print("\n== summary (speedup = best SDPA time / the flashcore row's time; > 1: flashcore faster) ==")
    print(report.summary_table(rows), flush=True)
    return 1 if (runner.dead or interrupted) else 0


if __name__ == "__main__":
    sys.exit(main())
