"""tools/variant-ab/timeline_summary.py: where a tile's SM cycles go, from
the stamps of a FLASHCORE_AB_TIMELINE build (timeline-v2.patch's codes)."""
import pathlib
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tile(t0, blocks):
    """Stamps of one tile of `blocks` key blocks starting at cycle t0, as
    timeline.h's codes: 7 start, 9 Q, 10 first K, 11 first S, per loop
    iteration 1..6, 12 last P·V issued, 8 its wait, 13 epilogue done."""
    st = [(t0, 7), (t0 + 10, 9), (t0 + 30, 10), (t0 + 60, 11)]
    for k in range(blocks - 1):
        b = t0 + 100 + 100 * k
        st += [(b, 1), (b + 10, 2), (b + 20, 3), (b + 50, 4), (b + 80, 5), (b + 90, 6)]
    end = t0 + 100 + 100 * (blocks - 1)
    st += [(end, 12), (end + 50, 8), (end + 100, 13)]
    return st, end + 100


def test_tile_phases_of_short_tiles(tmp_path):
    events, stamps, t = 64, [], 1000
    for _ in range(3):  # three 4-block tiles, 20 cycles between epilogue and next start
        st, done = _tile(t, 4)
        stamps += st
        t = done + 20
    words = [(c << 4) | code for c, code in stamps] + [0] * (events - len(stamps))
    words += [0] * events  # the second warpgroup: no stamps
    path = tmp_path / "tl.bin"
    path.write_bytes(struct.pack("3i", 1, 2, events) + struct.pack(f"{len(words)}Q", *words))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "variant-ab" / "timeline_summary.py"), str(path)],
                         check=True, capture_output=True, text=True).stdout
    # Three loop iterations a tile: none is a middle one (first, last two left out).
    assert "1 CTAs x 2 warpgroups, 0 iterations" in out
    assert "no key-loop iteration counted" in out
    assert "tiles: 3, key blocks a tile median 4" in out
    med = {line.split(" median ")[0].strip(): int(line.split(" median ")[1].split()[0])
           for line in out.splitlines() if " median " in line and "cycles" in line}
    assert med == {"Q wait": 10, "first K block wait": 20, "first Q·Kᵀ (turn, product)": 30,
                   "first softmax to loop": 40, "key loop": 300, "last P·V": 50, "epilogue": 50,
                   "tile start to epilogue done": 500, "epilogue done to next tile": 20}


def test_loop_phases_of_a_long_tile(tmp_path):
    events = 128
    stamps, _ = _tile(5000, 8)  # 7 loop iterations: 4 middle ones
    words = [(c << 4) | code for c, code in stamps] + [0] * (events - len(stamps))
    path = tmp_path / "tl.bin"
    path.write_bytes(struct.pack("3i", 1, 1, events) + struct.pack(f"{len(words)}Q", *words))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "variant-ab" / "timeline_summary.py"), str(path)],
                         check=True, capture_output=True, text=True).stdout
    assert "1 CTAs x 1 warpgroups, 4 iterations" in out
    med = {line.split(" median ")[0].strip(): int(line.split(" median ")[1].split()[0])
           for line in out.splitlines() if " median " in line and "cycles" in line}
    assert (med["K/V wait + turn wait"], med["issue Q·Kᵀ + P·V"], med["wait for S"], med["softmax"],
            med["wait for P·V"], med["rescale O, convert P, loop"]) == (10, 10, 30, 30, 10, 10)
    assert med["iteration (loop top to top)"] == 100
    assert med["key loop"] == 700 and med["tile start to epilogue done"] == 900
