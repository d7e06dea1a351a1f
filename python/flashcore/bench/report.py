"""Result rows and everything written from them: terminal tables, the CSV,
summary.md. Pure Python so the writers are tested without a GPU.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from typing import Dict, Iterable, List, Optional, Sequence

from .suites import Shape, gbps, speedup, tflops

STATUS_OK = "ok"
STATUS_WRONG = "WRONG"
STATUS_SKIP = "skip"
STATUS_ERROR = "error"
STATUS_NA = "n/a"


@dataclasses.dataclass
class Row:
    """One backend x shape. Times in microseconds per attention call."""

    suite: str
    backend: str
    dtype: str
    B: int
    H: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    causal: bool
    us_eager: Optional[float] = None
    us_p10: Optional[float] = None      # eager spread
    us_p90: Optional[float] = None
    us_graph: Optional[float] = None
    us_graph_p10: Optional[float] = None
    us_graph_p90: Optional[float] = None
    us_best: Optional[float] = None     # min of the eager and graph medians
    us_per_seq: Optional[float] = None
    us_per_head: Optional[float] = None
    tflops: Optional[float] = None
    pct_ceiling: Optional[float] = None
    gbps: Optional[float] = None
    relerr: Optional[float] = None
    speedup: Optional[float] = None     # flashcore-family rows: best competitor time / this row's time
    best_competitor: str = ""
    rot_sets: Optional[int] = None
    graph_calls: Optional[int] = None
    trials: Optional[int] = None
    status: str = STATUS_OK
    reason: str = ""

    @classmethod
    def for_shape(cls, shape: Shape, backend: str) -> "Row":
        return cls(shape.suite, backend, shape.dtype, shape.B, shape.H, shape.Hkv,
                   shape.Sq, shape.Sk, shape.D, shape.causal)

    @property
    def shape(self) -> Shape:
        return Shape(self.suite, self.B, self.H, self.Hkv, self.Sq, self.Sk, self.D, self.causal, self.dtype)

    def add_reason(self, text: str) -> None:
        if text:
            self.reason = f"{self.reason}; {text}" if self.reason else text


CSV_COLUMNS = [f.name for f in dataclasses.fields(Row)]


FLASHCORE = "flashcore"


def is_flashcore(backend: str) -> bool:
    """flashcore's own rows: the plain call and its variants (flashcore-kv,
    flashcore-paged). Every other row (today: the SDPA backends) is a
    competitor; flashcore rows are never each other's competitor."""
    return backend.startswith(FLASHCORE)


def _shape_key(r: Row):
    return (r.suite, r.dtype, r.B, r.H, r.Hkv, r.Sq, r.Sk, r.D, r.causal)


def finalize(rows: Sequence[Row], matmul_ceiling: Dict[str, float]) -> None:
    """Fill every derived column from the measured times, in place.

    TFLOP/s and GB/s use the better of the eager and graph medians (what the
    anchors did), with the same FLOP and byte counts for every row of a shape;
    speedup compares each flashcore-family row with the fastest competitor on
    the same basis, and appears on those rows only.
    """
    for r in rows:
        times = [t for t in (r.us_eager, r.us_graph) if t is not None and t > 0]
        r.us_best = min(times) if times else None
        if r.us_best is None:
            continue
        s = r.shape
        r.us_per_seq = r.us_best / r.B
        r.us_per_head = r.us_best / (r.B * r.H)
        r.tflops = tflops(s, r.us_best)
        r.gbps = gbps(s, r.us_best)
        ceil = matmul_ceiling.get(r.dtype)
        r.pct_ceiling = 100.0 * r.tflops / ceil if ceil else None
    groups: Dict[tuple, List[Row]] = {}
    for r in rows:
        groups.setdefault(_shape_key(r), []).append(r)
    for grp in groups.values():
        fc = [r for r in grp if is_flashcore(r.backend) and r.status == STATUS_OK and r.us_best]
        best = _best_competitor(grp)
        if best is None:
            continue
        for r in fc:
            r.best_competitor = best.backend
            r.speedup = speedup(r.us_best, best.us_best)


def _best_competitor(grp: Sequence[Row]) -> Optional[Row]:
    """The fastest working non-flashcore row of one shape, if any."""
    comp = [r for r in grp if not is_flashcore(r.backend) and r.status == STATUS_OK and r.us_best]
    return min(comp, key=lambda r: r.us_best) if comp else None


# ------------------------------------------------------------------ formatting

def fmt(x, nd: int = 1, width: int = 0) -> str:
    if x is None:
        s = "-"
    elif isinstance(x, float):
        if math.isinf(x) or math.isnan(x):
            s = str(x)
        elif nd == "e":
            s = f"{x:.1e}"
        else:
            s = f"{x:.{nd}f}"
    else:
        s = str(x)
    return s.rjust(width) if width else s


def shape_label(r: Row) -> str:
    return r.shape.label


def text_table(headers: Sequence[str], body: Sequence[Sequence[str]], right: Optional[Sequence[bool]] = None) -> str:
    widths = [len(h) for h in headers]
    for row in body:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    right = right or [True] * len(headers)

    def line(cells):
        return "  ".join(c.rjust(w) if rj else c.ljust(w) for c, w, rj in zip(cells, widths, right)).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in body]
    return "\n".join(out)


SUITE_HEADERS = ["backend", "shape", "us eager", "p10-p90", "us graph", "us/seq", "us/head",
                 "TFLOP/s", "%ceil", "GB/s", "relerr", "speedup", "status"]
_SUITE_RIGHT = [False, False] + [True] * 10 + [False]


def _status_cell(r: Row, width: int = 60) -> str:
    if r.status == STATUS_OK and not r.reason:
        return "ok"
    text = r.status + (f": {r.reason}" if r.reason else "")
    return text if len(text) <= width else text[: width - 3] + "..."


def suite_table(rows: Iterable[Row], reason_width: int = 60) -> str:
    body = []
    for r in rows:
        spread = f"{r.us_p10:.1f}-{r.us_p90:.1f}" if r.us_p10 is not None and r.us_p90 is not None else "-"
        body.append([
            r.backend, shape_label(r), fmt(r.us_eager, 2), spread, fmt(r.us_graph, 2),
            fmt(r.us_per_seq, 3), fmt(r.us_per_head, 3), fmt(r.tflops, 1), fmt(r.pct_ceiling, 1),
            fmt(r.gbps, 0), fmt(r.relerr, "e"), (f"{r.speedup:.2f}x" if r.speedup else "-"),
            _status_cell(r, reason_width),
        ])
    return text_table(SUITE_HEADERS, body, _SUITE_RIGHT)


SUMMARY_HEADERS = ["suite", "shape", "backend", "us", "best other", "its us", "speedup",
                   "TFLOP/s", "GB/s", "status"]
_SUMMARY_RIGHT = [False, False, False, True, False, True, True, True, True, False]


def summary_rows(rows: Sequence[Row]) -> List[List[str]]:
    """One line per shape and flashcore-family row (flashcore everywhere, plus
    flashcore-kv and flashcore-paged on decode), each against the fastest
    working competitor of that shape; us, TFLOP/s, GB/s and status are the
    flashcore row's. A shape without any flashcore row gets one 'not run'
    line. speedup = competitor time / flashcore time (> 1: flashcore faster)."""
    order: List[tuple] = []
    groups: Dict[tuple, List[Row]] = {}
    for r in rows:
        k = _shape_key(r)
        if k not in groups:
            order.append(k)
            groups[k] = []
        groups[k].append(r)
    body = []
    for k in order:
        grp = groups[k]
        best = _best_competitor(grp)
        for fc in [r for r in grp if is_flashcore(r.backend)] or [None]:
            if fc is None:
                fc_state = "not run"
            elif fc.status == STATUS_OK:
                fc_state = "ok" + (f" ({fc.reason})" if fc.reason else "")
            else:
                fc_state = fc.status + (f": {fc.reason}" if fc.reason else "")
            if len(fc_state) > 48:
                fc_state = fc_state[:45] + "..."
            ok = fc is not None and fc.status == STATUS_OK
            body.append([
                grp[0].suite, shape_label(grp[0]), fc.backend if fc is not None else FLASHCORE,
                fmt(fc.us_best, 2) if ok else "-",
                best.backend if best else "-", fmt(best.us_best, 2) if best else "-",
                (f"{fc.speedup:.2f}x" if ok and fc.speedup else "-"),
                fmt(fc.tflops, 1) if ok else "-", fmt(fc.gbps, 0) if ok else "-",
                fc_state,
            ])
    return body


def summary_table(rows: Sequence[Row]) -> str:
    return text_table(SUMMARY_HEADERS, summary_rows(rows), _SUMMARY_RIGHT)


# ------------------------------------------------------------------ CSV

def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.6g}"
    return v


def write_csv(path, rows: Sequence[Row], header_lines: Sequence[str]) -> None:
    """Comment block ('# key: value' lines) then one row per backend x shape.
    Read it back with pandas.read_csv(path, comment='#')."""
    with open(path, "w", newline="") as f:
        for line in header_lines:
            f.write("# " + line.replace("\n", " ") + "\n")
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([_csv_value(getattr(r, c)) for c in CSV_COLUMNS])


# ------------------------------------------------------------------ markdown

def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]
    return "\n".join(out)


MD_SUITE_HEADERS = ["backend", "shape", "us eager (p10-p90)", "us graph", "us/seq", "us/head",
                    "TFLOP/s", "% ceiling", "GB/s", "rel err", "speedup", "status"]


def markdown_report(rows: Sequence[Row], env_lines: Sequence[str], ceiling_lines: Sequence[str],
                    suites: Sequence[str]) -> str:
    parts = ["# flashcore benchmark", ""]
    parts += [f"- {line}" for line in env_lines]
    parts += ["", "## Ceilings measured in the same run", ""]
    parts += [f"- {line}" for line in ceiling_lines]
    parts += ["", "## Summary", "",
              "One line per shape and flashcore row (flashcore-kv / flashcore-paged: decode only). "
              "speedup = fastest working SDPA competitor's time / that flashcore row's time "
              "(> 1: flashcore faster); times are the better of the eager and graph medians; "
              "GB/s counts the same q, k, v and out bytes for every row.", ""]
    parts.append(md_table(SUMMARY_HEADERS, summary_rows(rows)))
    for suite in suites:
        srows = [r for r in rows if r.suite == suite]
        if not srows:
            continue
        body = []
        for r in srows:
            eager = "-" if r.us_eager is None else (
                f"{r.us_eager:.2f} ({r.us_p10:.1f}-{r.us_p90:.1f})" if r.us_p10 is not None else f"{r.us_eager:.2f}")
            body.append([r.backend, shape_label(r), eager, fmt(r.us_graph, 2), fmt(r.us_per_seq, 3),
                         fmt(r.us_per_head, 3), fmt(r.tflops, 1), fmt(r.pct_ceiling, 1), fmt(r.gbps, 0),
                         fmt(r.relerr, "e"), (f"{r.speedup:.2f}x" if r.speedup else "-"),
                         r.status + (f": {r.reason}" if r.reason else "")])
        parts += ["", f"## Suite `{suite}`", "", md_table(MD_SUITE_HEADERS, body)]
    return "\n".join(parts) + "\n"
