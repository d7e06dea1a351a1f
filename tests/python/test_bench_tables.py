"""tools/bench-tables: BENCHMARKS.md's tables from a benchmark run's CSV."""
import math
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "bench-tables"

HEADER = ("suite,backend,dtype,B,H,Hkv,Sq,Sk,D,causal,us_eager,us_p10,us_p90,us_graph,us_graph_p10,"
          "us_graph_p90,us_best,us_per_seq,us_per_head,tflops,pct_ceiling,gbps,relerr,speedup,"
          "best_competitor,rot_sets,graph_calls,trials,status,reason")


def row(suite, backend, B, S, D, causal, us, tflops, speedup="", best="", Sk=None, H=32):
    Sk = S if Sk is None else Sk
    return (f"{suite},{backend},bf16,{B},{H},{H},{S},{Sk},{D},{int(causal)},{us},0,0,,,,{us},{us / B},"
            f"{us / B / H},{tflops},0,0,1e-3,{speedup},{best},1,20,200,ok,")


def test_fa3_grid_geomean_and_cells_below(tmp_path):
    # Three cells: 1.25x, 0.80x against cuDNN, 1.00x against FlashAttention-2;
    # a failed competitor row is ignored; comment lines are skipped.
    lines = ["# gpu: test", HEADER,
             row("fa3", "flashcore", 32, 512, 64, False, 100.0, 500, 1.25, "sdpa-cudnn"),
             row("fa3", "sdpa-cudnn", 32, 512, 64, False, 125.0, 400),
             row("fa3", "flashcore", 32, 512, 64, True, 125.0, 200, 0.8, "sdpa-cudnn"),
             row("fa3", "sdpa-cudnn", 32, 512, 64, True, 100.0, 250),
             row("fa3", "flashcore", 16, 1024, 64, False, 50.0, 600, 1.0, "sdpa-flash"),
             row("fa3", "sdpa-flash", 16, 1024, 64, False, 50.0, 600),
             row("fa3", "sdpa-cudnn", 16, 1024, 64, False, 10.0, 3000).replace(",ok,", ",error,"),
             row("decode", "flashcore", 1, 1, 128, False, 12.0, 5, 1.05, "sdpa-cudnn", Sk=4096),
             row("decode", "flashcore-kv", 1, 1, 128, False, 12.6, 5, 1.0, "sdpa-cudnn", Sk=4096),
             row("decode", "sdpa-cudnn", 1, 1, 128, False, 12.6, 5, Sk=4096)]
    csv_path = tmp_path / "results.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, str(TOOL), str(csv_path)], capture_output=True, text=True, check=True).stdout
    assert "| 64 | none | 500 / 400 (1.25x) | 600 / 600 sdpa-flash (1.00x) |" in out
    assert "| 64 | causal | 200 / 250 (0.80x) | - |" in out
    gm = math.exp((math.log(1.25) + math.log(0.8) + math.log(1.0)) / 3)
    assert f"geometric mean {gm:.3f}x over 3 cells, 2 at >= 1.00x; below: d64 causal 512 0.80x" in out
    assert "| B1 KV 4096 | 12.00 | 12.60 | - | 12.60 (sdpa-cudnn) | 1.05x / 1.00x / - |" in out


def test_a_cell_that_prints_as_one_but_is_below_counts_below(tmp_path):
    # 0.996x prints as 1.00x in the grid; it is not at >= 1.00x, and the list
    # of cells below shows it with three decimals.
    lines = ["# gpu: test", HEADER,
             row("fa3", "flashcore", 16, 1024, 64, True, 200.35, 343, 0.996323, "sdpa-cudnn"),
             row("fa3", "sdpa-cudnn", 16, 1024, 64, True, 199.62, 344),
             row("fa3", "flashcore", 32, 512, 64, True, 100.0, 300, 1.0, "sdpa-cudnn"),
             row("fa3", "sdpa-cudnn", 32, 512, 64, True, 100.0, 300)]
    csv_path = tmp_path / "results.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, str(TOOL), str(csv_path)], capture_output=True, text=True, check=True).stdout
    assert "| 64 | causal | 300 / 300 (1.00x) | 343 / 344 (1.00x) |" in out
    assert "over 2 cells, 1 at >= 1.00x; below: d64 causal 1k 0.996x" in out


def test_no_file_is_a_usage_error():
    r = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True)
    assert r.returncode != 0 and "bench-tables RESULTS.csv" in r.stderr
