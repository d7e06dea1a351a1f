"""Summarizes the stamps a FLASHCORE_AB_TIMELINE build writes
(tools/variant-ab/patches/timeline-v2.patch, src/sm90/timeline.h there;
timeline.patch for trees of 2026-11-25; FLASHCORE_TIMELINE_OUT=FILE):
per consumer warpgroup of the first CTAs, the median SM cycles of each
phase of a key-loop iteration, over the iterations that are neither the
first nor the last two of their tile, and how often two warpgroups of one
CTA were in their softmax at the same time; with timeline-v2's tile stamps,
also where a tile's time goes outside the loop (Q and first K waits, the
first product, the last P·V, the epilogue, the gap to the next tile): the
costs that dominate short tiles (512 keys: 4 blocks of 128).

  python timeline_summary.py FILE
"""
import statistics
import struct
import sys

PHASES = [  # (name, from code, to code): timeline.h (timeline-v2.patch)
    ("K/V wait + turn wait", 1, 2),
    ("issue Q·Kᵀ + P·V", 2, 3),
    ("wait for S", 3, 4),
    ("softmax", 4, 5),
    ("wait for P·V", 5, 6),
    ("rescale O, convert P, loop", 6, 1),
]


def print_phase(name, values, spread=True, suffix=""):
    """One phase's line: median cycles, with the 10th and 90th percentiles."""
    v = sorted(values)
    line = f"  {name:28s} median {statistics.median(v):7.0f} cycles"
    if spread:
        line += f"  (p10 {v[len(v) // 10]:.0f}, p90 {v[9 * len(v) // 10]:.0f}{suffix})"
    print(line)


TILE_PHASES = [  # (name, from code, to code): timeline-v2's tile stamps (timeline.h)
    ("Q wait", 7, 9),
    ("first K block wait", 9, 10),
    ("first Q·Kᵀ (turn, product)", 10, 11),
    ("first softmax to loop", 11, 1),
    ("key loop", 1, 12),
    ("last P·V", 12, 8),
    ("epilogue", 8, 13),
    ("tile start to epilogue done", 7, 13),
]


def split_tiles(seq):
    """A warpgroup's stamps cut at each tile start (code 7, kept first)."""
    tiles = []
    for t, code in seq:
        if code == 7:
            tiles.append([])
        if tiles:
            tiles[-1].append((t, code))
    return tiles


def tile_summary(tiled):
    """Median cycles of each tile phase over all tiles (each warpgroup's
    stamps cut by split_tiles), and of the gap from a tile's epilogue to the
    next tile's start. Phases whose stamps a tile lacks (a one-block tile
    has no loop) are left out for that tile."""
    per = {name: [] for name, _, _ in TILE_PHASES}
    gaps, blocks = [], []
    for tiles in tiled:
        for i, tile in enumerate(tiles):
            first = {}
            for t, code in tile:
                first.setdefault(code, t)
            last12 = max((t for t, code in tile if code == 12), default=None)
            for name, f, to in TILE_PHASES:
                a = first.get(f)
                b = last12 if to == 12 else first.get(to)
                if a is not None and b is not None and b >= a:
                    per[name].append(b - a)
            blocks.append(1 + sum(1 for _, code in tile if code == 1))
            if i + 1 < len(tiles) and 13 in first:
                gaps.append(tiles[i + 1][0][0] - first[13])
    if not any(per.values()) or not blocks:
        return
    print(f"  tiles: {len(blocks)}, key blocks a tile median {statistics.median(blocks):.0f}")
    for name, _, _ in TILE_PHASES:
        if per[name]:
            print_phase(name, per[name], suffix=f", {len(per[name])} tiles")
    if gaps:
        print_phase("epilogue done to next tile", gaps, spread=False)


def main():
    data = open(sys.argv[1], "rb").read()
    ctas, wgs, events = struct.unpack_from("3i", data)
    stamps = struct.unpack_from(f"{ctas * wgs * events}Q", data, 12)
    per_phase = {name: [] for name, _, _ in PHASES}
    periods, softmax_spans, tiled = [], {}, []
    for c in range(ctas):
        for w in range(wgs):
            seq = [(s >> 4, s & 15) for s in stamps[(c * wgs + w) * events:(c * wgs + w + 1) * events] if s]
            tiled.append(split_tiles(seq))
            # Each tile's stamps between its start (7) and its last P·V (8);
            # the middle iterations of its key loop.
            for tile in tiled[-1]:
                codes = [code for _, code in tile]
                if 8 not in codes:
                    continue
                tile = tile[1:codes.index(8)]
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
        if per_phase[name]:
            print_phase(name, per_phase[name])
    if periods:
        print_phase("iteration (loop top to top)", periods, spread=False)
    else:
        # Not a lost stamp: short tiles have no middle iterations.
        print("  (no key-loop iteration counted: only those neither the first nor the last two of "
              "their tile are, so tiles of 4 key blocks or fewer have none)")
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
    tile_summary(tiled)


if __name__ == "__main__":
    main()
