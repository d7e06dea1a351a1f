"""One PNG per suite (matplotlib, Agg: no display on the GPU machines).

Only rows with status ok are drawn; a missing bar means the contender was
skipped, wrong or failed there, and the CSV says why.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

from .report import STATUS_OK, Row

# Fixed colours per contender so every figure of every run reads the same.
COLORS = {
    "flashcore": "#d62728",
    "flashcore-kv": "#ff7f0e",      # the decode-only KV-cache variants: warm hues next to flashcore's red
    "flashcore-paged": "#e377c2",
    "sdpa-flash": "#1f77b4",
    "sdpa-cudnn": "#2ca02c",
    "sdpa-efficient": "#9467bd",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _backends(rows: Sequence[Row]) -> List[str]:
    """Contenders with at least one drawable (ok) row, in run order: one that
    refused every shape would only leave empty bar slots."""
    seen: List[str] = []
    for r in rows:
        if r.backend not in seen and r.status == STATUS_OK:
            seen.append(r.backend)
    return seen


def _figure_legend(fig, axes) -> None:
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="upper right", ncol=len(labels), fontsize=8, frameon=False)


def _seq_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def _grouped_bars(ax, groups: Sequence, backends: Sequence[str], value, label_fmt="{:.0f}"):
    """Bars per group (x) and backend (colour), value written above each bar
    as in the FlashAttention-3 paper's figures."""
    n = max(1, len(backends))
    width = 0.8 / n
    for j, be in enumerate(backends):
        xs, ys = [], []
        for i, g in enumerate(groups):
            y = value(g, be)
            if y is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(y)
        if not xs:
            continue
        bars = ax.bar(xs, ys, width, label=be, color=COLORS.get(be))
        for b, y in zip(bars, ys):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), label_fmt.format(y),
                    ha="center", va="bottom", fontsize=6, rotation=90)


def plot_fa3(rows: Sequence[Row], path: str, ceiling: Optional[float] = None, title: str = "") -> None:
    plt = _plt()
    rows = [r for r in rows if r.suite == "fa3"]
    hdims = sorted({r.D for r in rows})
    backends = _backends(rows)
    fig, axes = plt.subplots(len(hdims), 2, figsize=(13, 3.6 * len(hdims)), squeeze=False)
    ok = {(r.backend, r.D, r.causal, r.Sq): r.tflops for r in rows if r.status == STATUS_OK and r.tflops}
    for i, d in enumerate(hdims):
        for j, causal in enumerate((False, True)):
            ax = axes[i][j]
            seqs = sorted({r.Sq for r in rows if r.D == d and r.causal == causal})
            _grouped_bars(ax, seqs, backends, lambda s, be: ok.get((be, d, causal, s)))
            ax.set_xticks(range(len(seqs)))
            ax.set_xticklabels([_seq_label(s) for s in seqs])
            ax.set_xlabel("sequence length (16k tokens per call)")
            ax.set_ylabel("TFLOP/s")
            ax.set_title(f"head dim {d}, {'causal' if causal else 'non-causal'}")
            if ceiling:
                ax.axhline(ceiling, color="grey", ls="--", lw=0.8)
                ax.text(-0.45, ceiling, f" bf16 matmul {ceiling:.0f}", va="bottom", fontsize=7, color="grey")
                ax.set_ylim(0, ceiling * 1.15)
            ax.grid(axis="y", alpha=0.3)
    _figure_legend(fig, [a for row in axes for a in row])
    fig.suptitle(title or "Attention forward, bf16, model dim 2048 (FlashAttention-3 grid)", x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _time_for_plot(r: Row) -> Optional[float]:
    # The same time basis as the tables and the speedup column.
    return r.us_best


def plot_seeds(rows: Sequence[Row], path: str, title: str = "") -> None:
    plt = _plt()
    rows = [r for r in rows if r.suite == "seeds"]
    backends = _backends(rows)
    grid = sorted({r.Sq for r in rows if not r.causal and len({x.B for x in rows if x.Sq == r.Sq}) > 1})
    singles = sorted({(r.Sq, r.causal) for r in rows if r.Sq not in grid})
    ncols = len(grid) + (1 if singles else 0)
    fig, axes = plt.subplots(1, max(1, ncols), figsize=(4.2 * max(1, ncols), 3.8), squeeze=False)
    for i, s in enumerate(grid):
        ax = axes[0][i]
        for be in backends:
            pts = sorted((r.B, _time_for_plot(r)) for r in rows
                         if r.backend == be and r.Sq == s and not r.causal and r.status == STATUS_OK
                         and _time_for_plot(r) is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=be, color=COLORS.get(be))
        ax.set_xscale("log", base=2)
        batches = sorted({r.B for r in rows if r.Sq == s})
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("batch")
        ax.set_ylabel("us per call (best of eager/graph)")
        ax.set_title(f"S={s}, fp16, H=16, D=64")
        ax.grid(alpha=0.3)
    if singles:
        ax = axes[0][len(grid)]
        ok = {(r.backend, r.Sq, r.causal): _time_for_plot(r) for r in rows if r.status == STATUS_OK}
        _grouped_bars(ax, singles, backends, lambda g, be: ok.get((be,) + tuple(g)), "{:.1f}")
        ax.set_xticks(range(len(singles)))
        ax.set_xticklabels([f"S={s}\n{'causal' if c else 'full'}" for s, c in singles])
        ax.set_ylabel("us per call (best of eager/graph)")
        ax.set_title("B=1")
        ax.grid(axis="y", alpha=0.3)
    _figure_legend(fig, axes[0])
    fig.suptitle(title or "Seed shapes, us per call (lower is better)", x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_bandwidth(rows: Sequence[Row], path: str, suite: str = "decode",
                   copy_gbps: Optional[float] = None, title: str = "") -> None:
    plt = _plt()
    rows = [r for r in rows if r.suite == suite]
    backends = _backends(rows)
    shapes: List[tuple] = []
    for r in rows:
        k = (r.B, r.Sk, r.H, r.Hkv, r.Sq, r.D, r.causal)
        if k not in shapes:
            shapes.append(k)
    ok: Dict[tuple, float] = {((r.backend,) + (r.B, r.Sk, r.H, r.Hkv, r.Sq, r.D, r.causal)): r.gbps
                              for r in rows if r.status == STATUS_OK and r.gbps}
    # Wider groups when the decode suite also carries flashcore-kv/-paged bars.
    fig, ax = plt.subplots(figsize=(max(6, max(1.6, 0.4 * len(backends)) * len(shapes) + 2), 4))
    _grouped_bars(ax, shapes, backends, lambda g, be: ok.get((be,) + tuple(g)))
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"B={b}\nKV={_seq_label(sk)}" for b, sk, *_ in shapes])
    ax.set_ylabel("GB/s (q, k, v, out bytes / time)")
    if copy_gbps:
        ax.axhline(copy_gbps, color="grey", ls="--", lw=0.8)
        ax.text(-0.45, copy_gbps, f" d2d copy {copy_gbps:.0f}", va="bottom", fontsize=7, color="grey")
        ax.set_ylim(0, copy_gbps * 1.15)
    ax.grid(axis="y", alpha=0.3)
    # One legend line across the top, in the headroom above the copy ceiling,
    # clear of the bars now that decode carries up to six series.
    ax.legend(fontsize=8, loc="upper center", ncol=max(1, len(backends)), frameon=False)
    ax.set_title(title or "Decode: 1 query token, bf16, 32 q heads / 8 KV heads, D=128")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_times(rows: Sequence[Row], path: str, suite: str, title: str = "") -> None:
    """Generic bar chart (us per call) for one-off --shape runs."""
    plt = _plt()
    rows = [r for r in rows if r.suite == suite]
    backends = _backends(rows)
    labels: List[str] = []
    for r in rows:
        if r.shape.label not in labels:
            labels.append(r.shape.label)
    ok = {(r.backend, r.shape.label): r.us_best for r in rows if r.status == STATUS_OK and r.us_best}
    fig, ax = plt.subplots(figsize=(max(6, 2.0 * len(labels) + 2), 4))
    _grouped_bars(ax, labels, backends, lambda g, be: ok.get((be, g)), "{:.1f}")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("us per call (best of eager/graph median)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or f"{suite} shapes (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_all(rows: Sequence[Row], out_dir: str, matmul_ceiling: Dict[str, float],
             copy_gbps: Optional[float]) -> List[str]:
    """Write every plot that has rows; returns the paths written. A plotting
    failure is the caller's to report, it never costs the measured numbers."""
    written = []
    suites = []
    for r in rows:
        if r.suite not in suites:
            suites.append(r.suite)
    for suite in suites:
        path = os.path.join(out_dir, f"{suite}.png")
        if suite == "fa3":
            plot_fa3(rows, path, matmul_ceiling.get("bf16"))
        elif suite == "seeds":
            plot_seeds(rows, path)
        elif suite == "decode":
            plot_bandwidth(rows, path, "decode", copy_gbps)
        else:
            plot_times(rows, path, suite)
        written.append(path)
    return written
