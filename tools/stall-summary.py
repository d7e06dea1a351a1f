#!/usr/bin/env python3
"""stall-summary: reads the per-instruction CSV that tools/stall-profile
exports (`ncu --page source --csv --print-source sass`) and prints where the
warps' samples fall: totals by stall reason, by opcode, and the hottest
instructions with their main reasons. Column names differ between Nsight
Compute versions, so they are found by pattern; the header is printed last.

With --phases it prints instead how the samples of the key loop (the
largest group of instructions executed equally often) split into the phases
of a ping-pong consumer's iteration, found by landmarks in the SASS: the
turn and K/V waits before the first HGMMA, the issue of the products, the
wait for S (`WARPGROUP.DEPBAR.LE gsb0, 0x1`), the mask checks, the wait for
the P·V (`... gsb0, 0x0`, which ptxas places at the top of the softmax),
the row maxima and shuffles up to the first MUFU.EX2, the exponential
stream to the last one, and the rest (O rescale, P conversion, loop).
Samples are taken per warp at a fixed interval, so a phase's share is its
share of the consumer warps' time (docs/kernels.md, 2026-11-25g).

    python3 tools/stall-summary.py stalls-1_16_16384_128-sass.csv [TOP]
    python3 tools/stall-summary.py --phases stalls-1_16_16384_128-sass.csv
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


def opcode_text(source):
    """The instruction without its predicate (`@!P0 MUFU.EX2 R1, R1` ->
    `MUFU.EX2 R1, R1`)."""
    return re.sub(r"^@!?U?P\w+\s+", "", source.strip())


def phases(loop, src, samples, total):
    """Prints the key loop's samples by phase (module docstring); returns 1
    if a landmark is missing."""
    ops = [opcode_text(r[src]) for r in loop]

    def first(pred, start):
        return next((k for k in range(start, len(ops)) if pred(ops[k])), None)

    issue = first(lambda o: o.startswith("HGMMA"), 0)
    wait_s = first(lambda o: o.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1"), issue or 0)
    wait_pv = first(lambda o: o.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"), (wait_s or 0) + 1)
    exp = first(lambda o: o.startswith("MUFU.EX2"), (wait_pv or 0) + 1)
    if None in (issue, wait_s, wait_pv, exp):
        print("landmarks not found in the key loop (HGMMA, DEPBAR.LE gsb0 0x1 then 0x0, MUFU.EX2)")
        return 1
    exp_end = max(k for k, o in enumerate(ops) if o.startswith("MUFU.EX2")) + 1
    bounds = [("turn and K/V waits", 0, issue), ("issuing the products", issue, wait_s),
              ("wait for S", wait_s, wait_s + 1), ("mask checks", wait_s + 1, wait_pv),
              ("wait for P·V", wait_pv, wait_pv + 1), ("row maxima and shuffles", wait_pv + 1, exp),
              ("exponential stream", exp, exp_end), ("O rescale, P conversion, loop", exp_end, len(ops))]
    loop_total = sum(number(r[samples]) for r in loop) or 1.0
    print(f"key loop: {len(loop)} instructions, {int(loop_total)} samples "
          f"({100 * loop_total / total:.1f}% of the kernel's)")
    for name, lo, hi in bounds:
        v = sum(number(r[samples]) for r in loop[lo:hi])
        print(f"  {name:30s} {100 * v / loop_total:5.1f}%  ({hi - lo} instructions)")
    return 0


def main():
    args = sys.argv[1:]
    want_phases = "--phases" in args
    args = [a for a in args if a != "--phases"]
    path = args[0]
    top = int(args[1]) if len(args) > 1 else 40
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
    if want_phases:
        if executed is None:
            print("no executed-instructions column; header:", header)
            return 1
        # The key loop: of the groups of at least 64 instructions that ran
        # equally often, the one with the most samples (spin loops run more
        # often but are short).
        groups = {}
        for r in body:
            groups.setdefault(number(r[executed]), []).append(r)
        big = [g for g in groups.values() if len(g) >= 64] or list(groups.values())
        loop = max(big, key=lambda g: sum(number(r[samples]) for r in g))
        return phases(loop, src, samples, total)
    print(f"{path}: {len(body)} instructions, {int(total)} samples")
    if reasons:
        by_reason = Counter({header[i]: sum(number(r[i]) for r in body) for i in reasons})
        print("by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common(14) if v))
    by_op = Counter()
    for r in body:
        ins = opcode_text(r[src])
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
