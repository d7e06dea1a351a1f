#!/usr/bin/env python3
"""The one list of sm90 forward-kernel instantiations.

Writes src/sm90/instantiations/<name>.cu (one translation unit per kernel, so
the CUDA build parallelizes on many cores), src/sm90/instantiations/grouped/
<tile>.cu (one translation unit per tile that includes all of its kernels:
both dtypes and every variant, for builds on few cores, CMake's
FLASHCORE_GROUPED_UNITS) and src/sm90/instantiations/registry.inc (the table
dispatch searches). Run it after editing KERNELS; `--check` exits 1 when the
committed files are stale (the test suite runs that).
"""
import argparse
import pathlib
import sys

# The plain kernels: (head_dim, block_m, block_n, stages). The key block
# (block_n) fixes each row's reduction order (docs/numerics.md): one per head
# dim, except head dim 256, whose 64-key blocks serve short sequences and its
# 80-key blocks long ones, picked by the keys of a sequence and the mask,
# never by the batch (tuning_table.h). Each tile has one stage count:
# dispatch picks tiles, never stage counts. (Head dim 128's 3-stage 128-row
# variant, O staged through Q, was dropped on 2026-11-25: the 2-stage kernel
# with its double-buffered Q was level or 1-3% faster on its shapes,
# bench/results/2026-11-25i-h100/ab1-no-s3-table.txt.) Head dim 64 also has
# 192-row tiles (three consumer warpgroups at 160 registers each), for the
# long and large calls where they beat 128-row tiles.
PLAIN_TILES = (
    (64, 64, 128, 4),
    (64, 128, 128, 5),
    (64, 192, 128, 4),
    (96, 128, 128, 3),
    (128, 64, 128, 2),
    (128, 128, 128, 2),
    (256, 128, 64, 2),
    (256, 128, 80, 2),
)
# The serving variants (varlen, KV cache, paged KV, split-KV: kernel_traits.h)
# of head dims up to 128, which serving calls use.
SERVING_TILES = (
    (64, 64, 128, 4),
    (64, 128, 128, 4),
    (96, 128, 128, 3),
    (128, 64, 128, 2),
    (128, 128, 128, 2),
    (256, 128, 64, 2),
)
# The one-warpgroup serving tiles (block_m 64) also compiled with the split-KV
# fold (kernel_traits.h kFold_, chunk_fold.h): dispatch takes that variant
# only for calls that run a split sequence's chunks in one CTA.
FOLD_TILES = tuple(t for t in SERVING_TILES if t[1] == 64)
# The plain tiles also compiled with K/V multicast over clusters of two CTAs
# (kernel_traits.h kClusterM): those it made faster in a same-run A/B
# (tuning_table.h tuned_cluster, which lists the same tiles).
CLUSTER_TILES = (
    (64, 192, 128, 4),
    (128, 128, 128, 2),
    (256, 128, 64, 2),
    (256, 128, 80, 2),
)
# Tiles also compiled with two consumer warpgroups that issue without
# ping-pong turns (kernel_traits.h kNoTurns_), one CTA and K/V multicast:
# dispatch takes them for calls of 1k keys and up (tuning_table.h
# tuned_no_turns, which lists the same tiles; the multicast twins since
# 2026-11-27c: 2.2-3.1% faster from 2k keys on unmasked calls; the serving
# twin since 2026-11-30: 1.1-2.7% on varlen calls from 2k keys).
NO_TURNS_TILES = (
    (128, 128, 128, 2),
)
CLUSTER_NO_TURNS_TILES = NO_TURNS_TILES
SERVING_NO_TURNS_TILES = NO_TURNS_TILES
# One-warpgroup plain tiles also compiled to run two CTAs an SM
# (kernel_traits.h kCtasPerSm_; two K/V stages, which fit half an SM's shared
# memory with two Q buffers and O apart): dispatch takes them for unmasked
# calls of more tiles than SMs and at most two an SM, four for sequences of
# up to 256 rows (tuning_table.h has_two_cta_kernel lists the same tiles).
TWO_CTA_TILES = (
    (64, 64, 128, 2),
)
# (dtype, head_dim, block_m, block_n, stages, serving, cluster_m, fold, no_turns, ctas_per_sm)
KERNELS = [
    (dt, d, bm, bn, st, serving, cluster, fold, no_turns, ctas)
    for serving, cluster, fold, no_turns, ctas, tiles in ((False, 1, False, False, 1, PLAIN_TILES),
                                                          (False, 2, False, False, 1, CLUSTER_TILES),
                                                          (False, 1, False, True, 1, NO_TURNS_TILES),
                                                          (False, 2, False, True, 1, CLUSTER_NO_TURNS_TILES),
                                                          (False, 1, False, False, 2, TWO_CTA_TILES),
                                                          (True, 1, False, False, 1, SERVING_TILES),
                                                          (True, 1, False, True, 1, SERVING_NO_TURNS_TILES),
                                                          (True, 1, True, False, 1, FOLD_TILES))
    for dt in ("fp16", "bf16")
    for (d, bm, bn, st) in tiles
]
assert {t[:3] for t in TWO_CTA_TILES} <= {t[:3] for t in PLAIN_TILES}, "a two-CTA tile has a one-CTA twin"
assert all(t[1] == 64 for t in TWO_CTA_TILES), "two CTAs an SM: one consumer warpgroup each"

assert set(NO_TURNS_TILES) <= set(PLAIN_TILES), "a tile without turns has a twin with them"
assert set(CLUSTER_NO_TURNS_TILES) <= set(CLUSTER_TILES), "a multicast tile without turns has a twin with them"
assert set(SERVING_NO_TURNS_TILES) <= set(SERVING_TILES), "a serving tile without turns has a twin with them"
for _tiles in (PLAIN_TILES, CLUSTER_TILES, NO_TURNS_TILES, TWO_CTA_TILES, SERVING_TILES, FOLD_TILES):
    assert len({t[:3] for t in _tiles}) == len(_tiles), "one stage count a tile: dispatch does not pick stages"

# The WGMMA widths CuTe's atom selectors offer by default. A kernel whose key
# block (the Q·Kᵀ atom's N) or head dim (the P·V atom's N) is another width,
# such as head dim 256's 80-key blocks, needs CuTe's extended shapes: its
# translation unit defines CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (without it
# CuTe silently picks a narrower atom, which kernel_traits.h turns into a
# compile error). Only there, and only in the device pass: the extended shapes
# are 76k more lines, which cost cudafe++ ~26 s in the host pass, where the
# atoms are never used (the kernel body is device-only, flash_fwd_kernel.h),
# and CI builds on 2 cores.
GMMA_WIDTHS = (8, 16, 32, 64, 96, 128, 192, 256)
EXTENDED_MACRO = "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"

ELEMENT = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
DTYPE = {"fp16": "DType::kFloat16", "bf16": "DType::kBFloat16"}
ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "sm90" / "instantiations"
GROUPED = OUT / "grouped"
HEADER = "// Generated by tools/gen_sm90_kernels.py: do not edit.\n"


def name(k):
    dt, d, bm, bn, st, serving, cluster, fold, no_turns, ctas = k
    return (f"flash_fwd_{'serving_' if serving else ''}{dt}_d{d}_m{bm}_n{bn}_s{st}"
            f"{f'_c{cluster}' if cluster > 1 else ''}{'_fold' if fold else ''}{'_nt' if no_turns else ''}"
            f"{f'_x{ctas}' if ctas > 1 else ''}")


def unit(k):
    dt, d, bm, bn, st, serving, cluster, fold, no_turns, ctas = k
    # (ctas_per_sm only where it is not the default: the other units keep their text)
    flags = ", ".join(str(x).lower() for x in (serving, cluster, fold, no_turns) + ((ctas,) if ctas > 1 else ()))
    traits = f"KernelTraits<{ELEMENT[dt]}, {d}, {bm}, {bn}, {st}, {flags}>"
    return (HEADER +
            (f"// {bn}-key blocks / head dim {d}: CuTe's extended WGMMA widths (tools/gen_sm90_kernels.py),\n"
             f"// in the device pass only.\n"
             f"#if defined(__CUDA_ARCH__)\n#define {EXTENDED_MACRO}\n#endif\n" if extended(k) else "") +
            '#include "sm90/flash_fwd_launch.h"\n'
            '#include "sm90/kernel_registry.h"\n\n'
            "namespace flashcore::sm90 {\n\n"
            f"Status {name(k)}(const AttentionArgs& args, const Problem& p, const LaunchPlan& plan,\n"
            f"                 cudaStream_t stream) {{\n"
            f"  return launch_flash_fwd<{traits}>(args, p, plan, stream);\n"
            "}\n\n"
            "}  // namespace flashcore::sm90\n")


# The grouped translation units (FLASHCORE_GROUPED_UNITS, which scripts/test
# turns on). A tile's kernels instantiate mostly the same CuTe templates (the
# layouts, copies and atoms depend on the tile far more than on the dtype or
# the variant), and the front end spends most of a unit's time instantiating
# them: on a 2-core AMD EPYC a kernel alone took 63 s, bf16 and fp16 of head
# dim 128's 128x128 tile together 83 s, and those two with their multicast
# twins 91 s (2026-11-28d); all 42 kernels in 13 units 1157 s against 3133 s
# in 42. The SASS of every kernel is the same either way (cuobjdump, all 42
# compared function by function, instruction words included). One group per tile and kind
# (plain or serving), so the head dim 256 groups are the only ones that need
# CuTe's extended widths and every member agrees on it.
def group(k):
    dt, d, bm, bn, st, serving, cluster, fold, no_turns, ctas = k
    if ctas > 1:  # with its one-CTA twin, named by the twin's stage count
        st = next(t[3] for t in PLAIN_TILES if t[:3] == (d, bm, bn))
    return f"flash_fwd_{'serving_' if serving else ''}d{d}_m{bm}_n{bn}_s{st}"


def extended(k):
    """Whether kernel k needs CuTe's extended WGMMA widths (its key block or head dim is not a default one)."""
    dt, d, bm, bn, *_ = k
    return bn not in GMMA_WIDTHS or d not in GMMA_WIDTHS


def groups():
    out = {}
    for k in KERNELS:
        out.setdefault(group(k), []).append(k)
    for members in out.values():
        assert len({extended(k) for k in members}) == 1, "a group's kernels agree on CuTe's extended widths"
    return out


def grouped_unit(members):
    return (HEADER +
            "// One translation unit for these kernels (CMake's FLASHCORE_GROUPED_UNITS): CuTe's templates\n"
            "// are instantiated once for all of them.\n" +
            "".join(f'#include "sm90/instantiations/{name(k)}.cu"\n' for k in members))


def registry():
    decls = "".join(f"Status {name(k)}(const AttentionArgs&, const Problem&, const LaunchPlan&, cudaStream_t);\n"
                    for k in KERNELS)
    rows = "".join(
        f'    {{{DTYPE[k[0]]}, {", ".join(str(x).lower() for x in k[1:])}, &{name(k)}, "{name(k)}"}},\n'
        for k in KERNELS)
    return (HEADER + decls + "\nconstexpr KernelEntry kKernelTable[] = {\n" + rows + "};\n")


def files():
    out = {OUT / f"{name(k)}.cu": unit(k) for k in KERNELS}
    out.update({GROUPED / f"{g}.cu": grouped_unit(members) for g, members in groups().items()})
    out[OUT / "registry.inc"] = registry()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail if the generated files are stale")
    args = ap.parse_args()
    want = files()
    have = {p: p.read_text() for d in (OUT, GROUPED) for p in d.glob("*") if p.suffix in (".cu", ".inc")}
    stale = [str(p) for p, text in want.items() if have.get(p) != text]
    extra = [str(p) for p in have if p not in want]
    if args.check:
        if stale or extra:
            print("stale sm90 instantiations: " + ", ".join(stale + extra) +
                  "\nrun: python3 tools/gen_sm90_kernels.py", file=sys.stderr)
            return 1
        print(f"sm90 instantiations up to date ({len(KERNELS)} kernels, {len(groups())} grouped units)")
        return 0
    GROUPED.mkdir(parents=True, exist_ok=True)
    for p in extra:
        pathlib.Path(p).unlink()
    for p, text in want.items():
        p.write_text(text)
    print(f"wrote {len(want)} files to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
