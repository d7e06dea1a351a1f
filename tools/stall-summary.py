#!/usr/bin/env python3
"""stall-summary: reads the per-instruction CSV that tools/stall-profile
exports (`ncu --page source --csv --print-source sass`) and prints where the
warps' samples fall: totals by stall reason, by opcode, and the hottest
instructions with their main reasons. Column names differ between Nsight
Compute versions, so they are found by pattern; the header is printed last.

    python3 tools/stall-summary.py stalls-1_16_16384_128-sass.csv [TOP]
"""
import csv
import re
import sys
from collections import Counter


def number(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rows = list(csv.reader(open(path, newline="")))
    head_i = next(i for i, r in enumerate(rows) if any(c in ("Address", "Source") for c in r))
    header, body = rows[head_i], [r for r in rows[head_i + 1:] if len(r) == len(rows[head_i])]
    col = {name: i for i, name in enumerate(header)}
    addr = col.get("Address")
    src = col.get("Source")
    samples = next((i for i, n in enumerate(header) if "Sampling" in n and "All" in n), None)
    if samples is None:
        samples = next((i for i, n in enumerate(header) if "Sampl" in n), None)
    executed = next((i for i, n in enumerate(header) if n.startswith("Instructions Executed")), None)
    # Per-reason sample columns: names with "stall" that are not the totals.
    # ("stall_wait" and its "stall_wait (Not Issued)" share; only the former.)
    reasons = [i for i, n in enumerate(header)
               if re.search(r"stall", n, re.I) and i != samples and not re.search(r"not.issued", n, re.I)
               and "All" not in n]
    if samples is None or src is None:
        print("no sample column found; header:", header)
        return 1
    total = sum(number(r[samples]) for r in body) or 1.0
    print(f"{path}: {len(body)} instructions, {int(total)} samples")
    if reasons:
        by_reason = Counter({header[i]: sum(number(r[i]) for r in body) for i in reasons})
        print("by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common(14) if v))
    by_op = Counter()
    for r in body:
        ins = re.sub(r"^@!?U?P\w+\s+", "", r[src].strip())
        by_op[ins.split(" ")[0] if ins else "?"] += number(r[samples])
    print("by opcode: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_op.most_common(14)))
    print("hottest instructions (share of samples, executed, reasons):")
    for r in sorted(body, key=lambda r: -number(r[samples]))[:top]:
        why = ""
        if reasons:
            rs = sorted(((number(r[i]), header[i]) for i in reasons), reverse=True)[:3]
            why = "  [" + ", ".join(f"{n} {100 * v / max(number(r[samples]), 1):.0f}%" for v, n in rs if v) + "]"
        ex = f"{int(number(r[executed])):>9}" if executed is not None else ""
        a = r[addr] if addr is not None else ""
        print(f"  {a:>8} {100 * number(r[samples]) / total:5.1f}% {ex}  {r[src].strip()[:70]}{why}")
    print("columns:", " | ".join(header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
