"""tools/sass-audit: the SASS of every flashcore kernel has no branch that
depends on tensor data, and the audit really catches planted leaks."""
import glob
import importlib.machinery
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_tool():
    loader = importlib.machinery.SourceFileLoader("sass_audit", str(ROOT / "tools" / "sass-audit"))
    spec = importlib.util.spec_from_loader("sass_audit", loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sass_audit"] = mod  # dataclasses look their module up here
    loader.exec_module(mod)
    return mod


audit = _load_tool()


def _cuobjdump():
    tool = audit.find_cuobjdump()
    if tool is None:
        pytest.fail("cuobjdump not found: scripts/test installs nvidia-cuda-cuobjdump into .venv")
    return tool


# ----------------------------------------------------------------- parsing
def test_parses_destinations_of_multi_output_instructions():
    shfl = audit.parse_insn(0, "SHFL.BFLY PT, R5, R4, 0x1, 0x1f")
    assert shfl.dests == ["R5"] and "R4" in shfl.srcs
    iadd = audit.parse_insn(0, "IADD3 R4, P0, PT, R2, R3, RZ")
    assert iadd.dests == ["R4", "P0"] and set(iadd.srcs) == {"R2", "R3"}
    setp = audit.parse_insn(0, "@!P2 FSETP.GT.AND P0, PT, R7, 0.5, PT")
    assert setp.guard == "P2" and setp.dests == ["P0"] and set(setp.srcs) == {"R7", "P2"}
    mma = audit.parse_insn(0, "HGMMA.64x128x16.F32 R24, gdesc[UR20], RZ, !UPT, gsb0")
    assert len(mma.dests) == 64 and mma.dests[0] == "R24" and mma.dests[-1] == "R87"
    assert "UR20" in mma.srcs and "R24" in mma.srcs  # accumulates
    lds = audit.parse_insn(0, "LDS.128 R8, [R2+0x100]")
    assert lds.dests == ["R8", "R9", "R10", "R11"] and lds.srcs == ["R2"]
    bra = audit.parse_insn(0, "@P0 BRA P1, 0x53b0")
    assert bra.targets == [0x53B0] and set(bra.srcs) == {"P0", "P1"}
    # CS2R reads a 64-bit special register into a pair (SRZ: zeroes both);
    # .32 into one. Counting only the first left the second's old taint in
    # place: a false positive on a branch that compared it (2026-11-25j).
    cs2r = audit.parse_insn(0, "CS2R R18, SRZ")
    assert cs2r.dests == ["R18", "R19"]
    clock = audit.parse_insn(0, "CS2R.32 R4, SR_CLOCKLO")
    assert clock.dests == ["R4"]


def _analyze(lines):
    return audit.analyze("k", [audit.parse_insn(a * 16, t) for a, t in enumerate(lines)])


def test_taint_flows_through_registers_and_is_cleared_by_overwrites():
    rep = _analyze([
        "LDG.E R2, desc[UR4][R6.64]",        # data
        "FADD R3, R2, 1",                     # derived from data
        "MOV R2, RZ",                         # overwritten: clean again
        "ISETP.GT.AND P0, PT, R2, RZ, PT",    # compares the clean value
        "@P0 BRA 0x70",                       # fine
        "FSETP.GT.AND P1, PT, R3, RZ, PT",    # compares the data
        "@P1 BRA 0x70",                       # data-dependent
        "EXIT",
    ])
    assert rep.branches == 3
    assert len(rep.violations) == 1 and "@P1 BRA" in rep.violations[0]


def test_spill_slots_carry_the_taint_of_what_was_stored_there():
    # A kernel that spills (head dim 256's 80-key kernels did, thread-index
    # values and tile counters, until 2026-11-27): a reload of a clean slot
    # is clean, a reload of a slot that holds data is data, slot by slot,
    # and a clean store clears a slot.
    rep = _analyze([
        "LDC R1, c[0x0][0x28]",
        "VIADD R1, R1, 0xffffffe8",           # the frame
        "S2R R4, SR_TID.X",
        "LDG.E R5, desc[UR4][R6.64]",          # data
        "STL [R1], R4",                        # slot 0x0: clean
        "STL [R1+0x8], R5",                    # slot 0x8: data
        "STL [R1+0xc], R5",                    # slot 0xc: data, then overwritten clean
        "STL [R1+0xc], RZ",
        "LDL R7, [R1]",
        "ISETP.GT.AND P0, PT, R7, 0x3, PT",
        "@P0 BRA 0x100",                       # thread index: fine
        "LDL R8, [R1+0xc]",
        "ISETP.GT.AND P2, PT, R8, 0x3, PT",
        "@P2 BRA 0x100",                       # overwritten clean: fine
        "LDL.LU R9, [R1+0x8]",
        "FSETP.GT.AND P1, PT, R9, RZ, PT",
        "@P1 BRA 0x100",                       # data-dependent
        "EXIT",
    ])
    assert rep.local_memory == 7
    assert len(rep.violations) == 1 and "@P1 BRA" in rep.violations[0], rep.violations


def test_spill_slots_are_followed_across_blocks():
    rep = _analyze([
        "LDC R1, c[0x0][0x28]",
        "VIADD R1, R1, 0xfffffff8",
        "LDS R5, [R2]",                        # data
        "ISETP.NE.AND P0, PT, R3, RZ, PT",     # a shape test
        "@P0 BRA 0x60",
        "STL [R1+0x4], R5",                    # data stored on one path only
        "LDL R6, [R1+0x4]",                    # 0x60: joins both paths
        "FSETP.GT.AND P1, PT, R6, RZ, PT",
        "@P1 BRA 0x90",                        # data on one incoming path: flagged
        "EXIT",
    ])
    assert len(rep.violations) == 1 and "@P1 BRA" in rep.violations[0], rep.violations


@pytest.mark.parametrize("escape", [
    "STL [R2], R4",                            # a local store through another register
    "ST.E [R2.64], R4",                        # a generic store could reach the stack
    "IADD3 R1, R1, R3, RZ",                    # the stack pointer moved by a register
    "STL.U8 [R1+0x1], R5",                     # part of a word
    "STL [R1+0x2], R5",                        # a word across two slots
])
def test_local_loads_stay_sources_when_slots_cannot_be_trusted(escape):
    # Only a stack that nothing but [R1+imm] accesses reach is tracked slot
    # by slot; otherwise every LDL is data, even of a clean slot.
    rep = _analyze([
        "LDC R1, c[0x0][0x28]",
        "S2R R4, SR_TID.X",
        "STL [R1], R4",
        escape,
        "LDL R7, [R1]",
        "ISETP.GT.AND P0, PT, R7, 0x3, PT",
        "@P0 BRA 0x80",
        "EXIT",
    ])
    assert len(rep.violations) == 1, (escape, rep.violations)


def test_a_zeroed_register_pair_is_clean():
    rep = _analyze([
        "LDG.E.64 R18, desc[UR4][R6.64]",     # data in R18 and R19
        "CS2R R18, SRZ",                      # both zeroed
        "ISETP.GE.AND P0, PT, R19, 0x1, PT",  # compares the zero
        "@P0 BRA 0x50",                       # fine
        "EXIT",
    ])
    assert rep.branches == 2 and not rep.violations  # the BRA and the EXIT


def test_predicated_writes_are_tracked_precisely_but_soundly():
    # R9 holds data; it is rewritten under !P0 and read under !P0 only: clean.
    same_guard = _analyze([
        "LDG.E R9, desc[UR4][R6.64]",
        "ISETP.NE.AND P0, PT, R1, RZ, PT",
        "@!P0 IMAD.U32 R9, RZ, RZ, UR16",
        "@!P0 PRMT R8, R9, 0x7610, R8",
        "PRMT R8, R8, 0x9910, RZ",
        "ISETP.NE.AND P1, PT, R8, RZ, PT",
        "@!P1 BRA 0x90",
        "EXIT",
    ])
    assert same_guard.violations == []
    # Rewritten under both P0 and !P0: clean afterwards.
    both_guards = _analyze([
        "LDG.E R4, desc[UR4][R6.64]",
        "ISETP.NE.AND P0, PT, R1, RZ, PT",
        "@P0 IMAD R4, R2, R3, RZ",
        "@!P0 IMAD R4, R2, 0x2, RZ",
        "ISETP.GE.AND P1, PT, R4, UR5, PT",
        "@!P1 BRA 0x70",
        "EXIT",
    ])
    assert both_guards.violations == []
    # Rewritten under P0 only: on the !P0 path R4 still holds the data.
    one_guard = _analyze([
        "LDG.E R4, desc[UR4][R6.64]",
        "ISETP.NE.AND P0, PT, R1, RZ, PT",
        "@P0 IMAD R4, R2, R3, RZ",
        "ISETP.GE.AND P1, PT, R4, UR5, PT",
        "@!P1 BRA 0x60",
        "EXIT",
    ])
    assert len(one_guard.violations) == 1
    # A PRMT that keeps a loaded byte keeps the taint.
    kept_byte = _analyze([
        "LDS.U8 R5, [R2]",
        "PRMT R8, R5, 0x7610, RZ",
        "ISETP.NE.AND P1, PT, R8, RZ, PT",
        "@P1 BRA 0x50",
        "EXIT",
    ])
    assert len(kept_byte.violations) == 1


def test_predicated_writes_are_followed_across_blocks():
    # The tile loop's next-tile index: gridDim.x loaded under !P0 (R21 held
    # data on the loop's back edge), a branch that leaves P0 alone, then
    # read under !P0: clean (the d64 128-row kernel, 2026-11-27).
    held = [
        "LDG.E R21, desc[UR4][R6.64]",        # data, from an earlier tile
        "ISETP.NE.AND P0, PT, R1, RZ, PT",
        "@!P0 LDC R21, c[0x0][0xc]",
        "ISETP.NE.AND P1, PT, R2, RZ, PT",
        "@P1 BRA 0x70",
        "NOP",
        "NOP",
        "@P0 LOP3.LUT R13, R19, 0xfffffffe, R20, 0xe2, !PT",  # 0x70
        "@!P0 IMAD R13, R20, R21, R0",
        "ISETP.GE.AND P2, PT, R13, UR13, PT",
        "@P2 BRA 0xd0",
        "EXIT",
    ]
    assert _analyze(held).violations == []
    # P0 rewritten on one path into the join: the write under the old !P0
    # says nothing about the new one.
    rewritten = list(held)
    rewritten[5] = "ISETP.NE.AND P0, PT, R3, RZ, PT"
    assert len(_analyze(rewritten).violations) == 1
    # Written clean on one path only: R21 may still hold the data.
    one_path = list(held)
    one_path[2:5] = ["NOP", "@P1 BRA 0x60", "@!P0 LDC R21, c[0x0][0xc]"]
    assert len(_analyze(one_path).violations) == 1


def test_predicate_copies_guard_edges_and_masks_are_precise_but_sound():
    # P0 is a copy of UP0: a write under @P0 is a write under @UP0.
    copy = [
        "LDG.E R15, desc[UR4][R6.64]",
        "UISETP.NE.AND UP0, UPT, UR9, URZ, UPT",
        "PLOP3.LUT P0, PT, PT, PT, UP0, 0x80, 0x0",
        "@P0 IMAD.MOV.U32 R15, RZ, RZ, R2",
        "@UP0 ISETP.GE.AND P1, PT, R15, RZ, PT",
        "@UP0 BRA 0x80",
        "EXIT",
        "@P1 BRA 0x90",
        "EXIT",
    ]
    assert _analyze(copy).violations == []
    # ... unless UP0 changes in between: then the copy says nothing.
    rewritten = copy[:4] + ["UISETP.NE.AND UP0, UPT, UR10, URZ, UPT"] + copy[4:]
    assert len(_analyze(rewritten).violations) == 1
    # A value clean under P0 (R4 rewritten under P0, then compared without a
    # guard) is clean where a branch proved P0, and tainted where it did not.
    edge = [
        "LDG.E R4, desc[UR4][R6.64]",
        "ISETP.NE.AND P0, PT, R1, RZ, PT",
        "@P0 IMAD R4, R2, R3, RZ",
        "ISETP.GE.AND P1, PT, R4, UR5, PT",
        "@!P0 BRA 0x70",
        "@P1 BRA 0x70",   # reached only with P0: clean
        "EXIT",
        "@P1 BRA 0x90",   # reached from @!P0 BRA too: data-dependent
        "EXIT",
    ]
    rep = _analyze(edge)
    assert len(rep.violations) == 1 and rep.violations[0].startswith("0x0070")
    # IMAD.WIDE: 32-bit multiplicands, 64-bit addend (R6:R7).
    wide = lambda taint: _analyze([
        f"LDG.E R{taint}, desc[UR4][R8.64]",
        "IMAD.WIDE R4, R2, 0x4, R6",
        "ISETP.GE.AND P1, PT, R5, RZ, PT",
        "@P1 BRA 0x50",
        "EXIT",
    ])
    assert wide(3).violations == []     # R3 is not read (R2 is 32-bit)
    assert len(wide(7).violations) == 1  # R7 is the addend's high half
    # LOP3 with an immediate mask reads only the masked bytes.
    masked = lambda mask: _analyze([
        "LDS.U8 R5, [R2]",
        "PRMT R20, R5, 0x0044, RZ",   # the loaded byte into bytes 2 and 3
        f"LOP3.LUT P0, RZ, R20, {mask}, RZ, 0xc0, !PT",
        "@P0 BRA 0x50",
        "EXIT",
    ])
    assert masked("0xff").violations == []
    assert len(masked("0xff0000").violations) == 1


# ----------------------------------------------------------------- planted leaks
def test_audit_catches_planted_data_dependent_branches(tmp_path, nvcc):
    cubin = tmp_path / "planted.cubin"
    subprocess.run([nvcc, "-cubin", "-O3", "-gencode=arch=compute_90a,code=sm_90a",
                    str(ROOT / "tests" / "sass_audit" / "planted_kernels.cu"), "-o", str(cubin)], check=True)
    reports = {r.name: r for r in audit.audit_files([str(cubin)], _cuobjdump())}
    assert set(reports) == {"leaky_global_loop", "leaky_shared_branch", "clean_select", "clean_metadata_loop",
                            "leaky_metadata_address"}
    assert reports["leaky_global_loop"].violations, "a loop bound loaded from global memory was missed"
    assert reports["leaky_shared_branch"].violations, "a branch on shared-memory data was missed"
    assert reports["clean_select"].violations == []
    assert reports["clean_select"].branches > 0  # its index branches are seen, and allowed
    assert reports["clean_metadata_loop"].violations == [], "a branch on a sequence length was flagged"
    assert reports["clean_metadata_loop"].metadata_loads == 1
    assert reports["leaky_metadata_address"].violations, "a metadata load at a data-dependent address was missed"


# ----------------------------------------------------------------- the library
def _kernel_objects():
    build = pathlib.Path(os.environ.get("FLASHCORE_BUILD_DIR", ROOT / "build"))
    sm90 = build / "CMakeFiles" / "flashcore_sm90.dir"
    # The attention kernels, and the split-KV combine and KV-append kernels
    # (they read tensor data too).
    # One object per kernel, or per tile with FLASHCORE_GROUPED_UNITS
    # (instantiations/grouped/, scripts/test): both are under instantiations/.
    objects = glob.glob(str(sm90 / "**" / "instantiations" / "**" / "*.o"), recursive=True)
    for name in ("splitkv_combine.cu.o", "kv_append.cu.o"):
        objects += glob.glob(str(sm90 / "**" / name), recursive=True)
    return sorted(objects)


def test_flashcore_kernels_have_no_data_dependent_branch_and_no_local_memory():
    # No kernel spills (issue 3): head dim 256's 80-key kernels, which use
    # all 240 registers in their key loop, held 28-36 bytes of thread-index
    # values and tile counters in local memory until they kept only their
    # tile count across the loop (src/sm90/kernel_traits.h kLeanTileState).
    objects = _kernel_objects()
    if not objects:
        pytest.skip("no sm90 kernel objects in the build dir (built without CUDA)")
    reports = audit.audit_files(objects, _cuobjdump())
    assert len(reports) >= len(objects)  # one kernel per object at least (the combine has two)
    lines = [f"{r.name[:70]:<70} branches={r.branches} data-dependent={len(r.violations)} local={r.local_memory}"
             for r in reports]
    print("\n".join(lines))
    for r in reports:
        assert r.branches > 0
        assert r.violations == [], f"{r.name}: " + "; ".join(r.violations)
        assert r.local_memory == 0, f"{r.name}: {r.local_memory} local-memory instructions"


# flash_fwd_kernel<KernelTraits<Element, head dim, block_m, block_n, stages,
# serving, cluster_m, fold, no_turns, ctas_per_sm>> as the Itanium ABI mangles
# it (builds from before ctas_per_sm existed end at no_turns: one CTA an SM).
_TRAITS_RE = re.compile(r"KernelTraitsIN7cutlass(10bfloat16_t|6half_t)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)"
                        r"ELb([01])ELi(\d+)ELb([01])ELb([01])(?:ELi(\d+))?EE")


def _kernel_name(gen, mangled: str):
    """tools/gen_sm90_kernels.py's name (gen: the conftest fixture
    gen_kernels) of an attention kernel's entry function (None for any other
    function)."""
    m = _TRAITS_RE.search(mangled)
    if m is None:
        return None
    dt = {"10bfloat16_t": "bf16", "6half_t": "fp16"}[m.group(1)]
    d, bm, bn, st, serving, cluster, fold, no_turns = (int(x) for x in m.groups()[1:9])
    ctas = int(m.group(10) or 1)
    return gen.name((dt, d, bm, bn, st, bool(serving), cluster, bool(fold), bool(no_turns), ctas))


def test_kernel_names_from_mangled_entry_functions(gen_kernels):
    gen = gen_kernels
    mangled = ("_ZN9flashcore4sm9016flash_fwd_kernelINS0_12KernelTraitsIN7cutlass10bfloat16_tELi128ELi128"
               "ELi128ELi2ELb0ELi2ELb0ELb1EEEEEvNS0_12KernelParamsIT_EE")
    assert _kernel_name(gen, mangled) == "flash_fwd_bf16_d128_m128_n128_s2_c2_nt"
    assert _kernel_name(gen, mangled.replace("10bfloat16_t", "6half_t").replace("Li2ELb0ELi2", "Li2ELb1ELi1")) \
        == "flash_fwd_serving_fp16_d128_m128_n128_s2_nt"
    two = ("_ZN9flashcore4sm9016flash_fwd_kernelINS0_12KernelTraitsIN7cutlass6half_tELi64ELi64ELi128ELi2ELb0ELi1"
           "ELb0ELb0ELi2EEEEEvNS0_12KernelParamsIT_EE")
    assert _kernel_name(gen, two) == "flash_fwd_fp16_d64_m64_n128_s2_x2"
    assert _kernel_name(gen, two.replace("ELi2EEEEE", "ELi1EEEEE").replace("ELi128ELi2ELb0", "ELi128ELi4ELb0")) \
        == "flash_fwd_fp16_d64_m64_n128_s4"
    assert _kernel_name(gen, "_ZN9flashcore4sm9024splitkv_combine_kernelILi128EEEvNS0_13CombineParamsE") is None
    assert gen.name(gen.KERNELS[0]).startswith("flash_fwd_")


def _kernel_sass(gen, pattern, what):
    """(kernel name, SASS) of each attention kernel in the build whose
    tools/gen_sm90_kernels.py name matches `pattern`, one per entry function
    whatever the translation units hold; skips the test when the build has
    none."""
    found = []
    for o in _kernel_objects():
        for mangled, body in audit.split_functions(audit.dump_sass(o, _cuobjdump())).items():
            name = _kernel_name(gen, mangled)
            if name is not None and re.search(pattern, name):
                found.append((name, body))
    if not found:
        pytest.skip(f"no {what} kernels in the build dir (built without CUDA)")
    return found


# ------------------------------------------------- softmax under the P·V product
def _counts_between(sass: str, opens, closes, counted, restart: bool) -> list[int]:
    """For each stretch of SASS lines from one where opens(line) to the next
    where closes(line), how many lines in between satisfy counted(line). With
    restart, a second opening line starts the count again; without, the
    stretch begins at the first one."""
    counts, inside = [], None
    for line in sass.splitlines():
        if opens(line):
            inside = 0 if restart or inside is None else inside
        elif closes(line) and inside is not None:
            counts.append(inside)
            inside = None
        elif inside is not None and counted(line):
            inside += 1
    return counts


def _exps_between_waits(sass: str) -> list[int]:
    """For each `wait until one wgmma batch is left` (the loop's wait for
    S = Q·Kᵀ), the MUFU.EX2 instructions before the next full wait (for P·V)."""
    return _counts_between(sass, lambda l: "WARPGROUP.DEPBAR.LE gsb0, 0x1" in l,
                           lambda l: "WARPGROUP.DEPBAR.LE gsb0, 0x0" in l, lambda l: "MUFU.EX2" in l, restart=True)


def test_kernels_without_turns_run_the_softmax_under_the_pv_product(gen_kernels):
    # 64-row tiles (one consumer warpgroup), head dim 256 and the `_nt`
    # kernels (two warpgroups without ping-pong turns: kernel_traits.h
    # kNoTurns_) compute a block's softmax while the previous
    # block's P·V runs (src/sm90/mainloop_mma.h: kOverlapSoftmax). ptxas
    # would hoist the P·V wait above the softmax unless a basic block ends
    # between them (wgmma_utils.h: basic_block_boundary): every exp2 of the
    # block must lie between the two waits, a thread's share of the 64 x
    # block_n scores (block_n / 2: 64 at 128 keys, 40 at 80).
    for name, sass in _kernel_sass(gen_kernels, r"_m64_|_d256_|_nt$", "64-row, head-dim-256 or no-turns"):
        block_n = int(re.search(r"_n(\d+)_", name).group(1))
        counts = _exps_between_waits(sass)
        assert counts, f"{name}: no wait for Q·Kᵀ with P·V in flight"
        assert min(counts) >= block_n // 2, f"{name}: exp2s between the waits: {counts}"


# ------------------------------------------------ O rescaled under the Q·Kᵀ
def _fmuls_between_products(sass: str) -> list[int]:
    """For each batch of Q·Kᵀ wgmmas (A from shared memory) directly followed
    by a P·V batch (A from registers), the FMULs issued between the first
    Q·Kᵀ wgmma and the first P·V wgmma."""
    def pv(line):
        return re.search(r"HGMMA\.\S+ R\d+, R\d+, gdesc\[\w+\]\.tnspB", line) is not None

    return _counts_between(sass, lambda l: "HGMMA" in l and not pv(l), pv,
                           lambda l: re.search(r"\bFMUL\b", l) is not None, restart=False)


def test_one_and_three_warpgroup_kernels_rescale_o_under_the_qk_product(gen_kernels):
    # The 64- and 192-row tiles rescale O (32 FMULs a thread at head dim 64)
    # between the issue of the next Q·Kᵀ and that of the P·V product
    # (src/sm90/mainloop_mma.h: kRescaleInTurn), where the Q·Kᵀ hides them.
    for name, sass in _kernel_sass(gen_kernels, r"_d64_m(64|192)_", "head-dim-64 64/192-row"):
        counts = _fmuls_between_products(sass)
        assert counts, f"{name}: no Q·Kᵀ batch followed by a P·V batch"
        assert max(counts) >= 32, f"{name}: FMULs between the products: {counts}"
