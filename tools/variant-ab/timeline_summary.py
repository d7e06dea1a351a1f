"""Summarizes the stamps a FLASHCORE_AB_TIMELINE build writes
(tools/variant-ab/patches/timeline.patch, FLASHCORE_TIMELINE_OUT=FILE):
per consumer warpgroup of the first CTAs, the median SM cycles of each
phase of a ping-pong key-loop iteration, over the iterations that are
neither the first nor the last two of their tile, and how often two
warpgroups of one CTA were in their softmax at the same time.

  python timeline_summary.py FILE
"""
import statistics
import struct
import sys

PHASES = [  # (name, from code, to code): mainloop_mma.h Timeline
    ("K/V wait + turn wait", 1, 2),
    ("issue Q·Kᵀ + P·V", 2, 3),
    ("wait for S", 3, 4),
    ("softmax", 4, 5),
    ("wait for P·V", 5, 6),
    ("rescale O, convert P, loop", 6, 1),
]


def main():
    data = open(sys.argv[1], "rb").read()
    ctas, wgs, events = struct.unpack_from("3i", data)
    stamps = struct.unpack_from(f"{ctas * wgs * events}Q", data, 12)
    per_phase = {name: [] for name, _, _ in PHASES}
    periods, softmax_spans = [], {}
    for c in range(ctas):
        for w in range(wgs):
            seq = [(s >> 4, s & 15) for s in stamps[(c * wgs + w) * events:(c * wgs + w + 1) * events] if s]
            # Split into tiles (7 ... 8) and keep the middle iterations.
            tiles, cur = [], None
            for t, code in seq:
                if code == 7:
                    cur = []
                elif code == 8 and cur is not None:
                    tiles.append(cur)
                    cur = None
                elif cur is not None:
                    cur.append((t, code))
            for tile in tiles:
                tops = [i for i, (_, code) in enumerate(tile) if code == 1]
                for a, b in zip(tops[1:-2], tops[2:-1]):
                    it = tile[a:b + 1]
                    at = {code: t for t, code in it[:-1]}
                    for name, f, to in PHASES:
                        end = it[-1][0] if to == 1 else at.get(to)
                        if f in at and end is not None:
                            per_phase[name].append(end - at[f])
                    periods.append(it[-1][0] - it[0][0])
                    if 4 in at and 5 in at:
                        softmax_spans.setdefault(c, {}).setdefault(w, []).append((at[4], at[5]))
    print(f"{sys.argv[1]}: {ctas} CTAs x {wgs} warpgroups, {len(periods)} iterations")
    for name, _, _ in PHASES:
        v = per_phase[name]
        if v:
            print(f"  {name:28s} median {statistics.median(v):7.0f} cycles  (p10 {sorted(v)[len(v) // 10]:.0f}, "
                  f"p90 {sorted(v)[9 * len(v) // 10]:.0f})")
    if periods:
        print(f"  {'iteration (loop top to top)':28s} median {statistics.median(periods):7.0f} cycles")
    # Softmax of two warpgroups of one CTA overlapping in time.
    both, total = 0, 0
    for c, by_wg in softmax_spans.items():
        if len(by_wg) < 2:
            continue
        a, b = by_wg[0], by_wg[1]
        for s0, e0 in a:
            total += e0 - s0
            for s1, e1 in b:
                both += max(0, min(e0, e1) - max(s0, s1))
    if total:
        print(f"  warpgroup 0's softmax time that warpgroup 1 also spent in its softmax: {100 * both / total:.1f}%")


if __name__ == "__main__":
    main()
