"""tools/ptxas-summary: ptxas's -v report of a build log, one row per entry
function, credited to the translation unit ninja was building."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "ptxas-summary"

# The shape of a ninja build log with `-Xptxas=-v,--warn-on-spills` (nvcc 13.0):
# a C++ unit with no report, an instantiation unit that spills, a unit with
# two kernels and a non-inlined device function (whose frame comes last and
# is not an entry's), and a clean instantiation unit.
LOG = """\
[1/9] Building CXX object CMakeFiles/flashcore_objs.dir/src/api/validation.cpp.o
[2/9] Building CUDA object CMakeFiles/flashcore_sm90.dir/src/sm90/instantiations/flash_fwd_bf16_d256_m128_n80_s2_c2.cu.o
ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '_Z6spillyPf' for 'sm_90a'
ptxas info    : Function properties for _Z6spillyPf
    24 bytes stack frame, 36 bytes spill stores, 40 bytes spill loads
ptxas warning : Registers are spilled to local memory in function '_Z6spillyPf', 36 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers, 24 bytes cumulative stack size
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized in the function '_Z6spillyPf'
ptxas info    : Compile time = 498.352 ms
[3/9] Building CUDA object CMakeFiles/flashcore_sm90.dir/src/sm90/splitkv_combine.cu.o
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z2k2Pf' for 'sm_90a'
ptxas info    : Function properties for _Z2k2Pf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 6.489 ms
ptxas info    : Compiling entry function '_Z2k1Pfi' for 'sm_90a'
ptxas info    : Function properties for _Z2k1Pfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers
ptxas info    : Function properties for _Z3fooPfi
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
[4/9] Building CUDA object CMakeFiles/flashcore_sm90.dir/src/sm90/instantiations/flash_fwd_bf16_d128_m128_n128_s2_nt.cu.o
ptxas info    : Compiling entry function '_Z5cleanPf' for 'sm_90a'
ptxas info    : Function properties for _Z5cleanPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
"""


def run(tmp_path, text, *args):
    log = tmp_path / "build.log"
    log.write_text(text)
    return subprocess.run([sys.executable, str(TOOL), str(log), *args], capture_output=True, text=True)


def rows(out):
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| unit")]


def test_one_row_per_entry_function_with_its_units_numbers(tmp_path):
    r = run(tmp_path, LOG)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == ("3 translation units, 4 entry functions: 1 with a stack frame or spills, "
                                        "1 units with ptxas warnings.")
    got = rows(r.stdout)
    # Kernel instantiations first, by name. Columns: unit, entry function
    # (blank for an instantiation's one kernel), registers, barriers, stack
    # frame, spill stores, spill loads.
    assert got[0] == ["flash_fwd_bf16_d128_m128_n128_s2_nt", "", "168", "16", "0", "0", "0"]
    assert got[1] == ["flash_fwd_bf16_d256_m128_n80_s2_c2", "", "168", "16", "24", "36", "40"]
    # Two kernels of one unit, named (demangled where c++filt exists); the
    # device function's 256-byte frame is not k1's.
    assert got[2][0] == got[3][0] == "splitkv_combine"
    assert got[2][1] in ("`k2`", "`_Z2k2Pf`") and got[2][2:] == ["8", "0", "0", "0", "0"]
    assert got[3][1] in ("`k1`", "`_Z2k1Pfi`") and got[3][2:] == ["40", "1", "0", "0", "0"]
    assert len(got) == 4
    # The warning and ptxas's performance note (an info line), function names
    # and line numbers stripped.
    assert ("flash_fwd_bf16_d256_m128_n80_s2_c2: Registers are spilled to local memory, "
            "36 bytes spill stores, 40 bytes spill loads; (C7515) Potential Performance Loss: "
            "wgmma.mma_async instructions are serialized") in r.stdout


def test_check_fails_on_spills_and_passes_without(tmp_path):
    assert run(tmp_path, LOG, "--check").returncode == 1
    clean = LOG.split("[2/9]")[0] + "[4/9]" + LOG.split("[4/9]")[1]
    r = run(tmp_path, clean, "--check", "--title", "t")
    assert r.returncode == 0, r.stdout
    assert r.stdout.startswith("# t\n\n1 translation units, 1 entry functions: 0 with")


def test_a_later_build_of_a_unit_replaces_its_earlier_report(tmp_path):
    """scripts/gpu-check appends each build's log to one history: a rebuilt
    unit is reported once, with its latest numbers, and a build that
    recompiled nothing leaves the earlier reports standing."""
    rebuilt = LOG.split("[4/9]")[0].replace("[2/9]", "[1/1]").replace(
        "24 bytes stack frame, 36 bytes spill stores, 40 bytes spill loads",
        "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads").replace(
        ", 24 bytes cumulative stack size", "")
    rebuilt = "\n".join(line for line in rebuilt.splitlines()
                        if "Registers are spilled" not in line and "(C7515)" not in line) + "\n"
    r = run(tmp_path, LOG + rebuilt + "ninja: no work to do.\n")
    assert r.returncode == 0, r.stderr
    got = rows(r.stdout)
    assert len(got) == 4
    assert got[1] == ["flash_fwd_bf16_d256_m128_n80_s2_c2", "", "168", "16", "0", "0", "0"]
    assert r.stdout.splitlines()[0].startswith("3 translation units, 4 entry functions: 0 with")


def test_a_log_without_reports_is_an_error(tmp_path):
    r = run(tmp_path, "[1/1] Building CXX object x.cpp.o\nninja: no work to do.\n")
    assert r.returncode == 2 and "no ptxas report" in r.stderr


# Two tiny units compiled here: an "instantiation" with an array written at
# computed indices (in local memory: LDL/STL, no HGMMA, so --check must fail
# on it) and another unit.
PLANTED = """
__global__ void planted(float* p, int i) { float a[64]; for (int k = 0; k < 64; ++k) a[(k * i) & 63] = p[k]; p[0] = a[i & 63]; }
"""
OTHER = "__global__ void other(float* p) { p[threadIdx.x] = 1.f; }\n"


def test_objects_add_the_sass_counts(tmp_path, nvcc):
    objects = tmp_path / "objects"
    objects.mkdir()
    log = []
    for i, (name, src) in enumerate((("flash_fwd_planted", PLANTED), ("other", OTHER))):
        cu = tmp_path / f"{name}.cu"
        cu.write_text(src)
        r = subprocess.run([nvcc, "-c", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", str(cu),
                            "-o", str(objects / f"{name}.cu.o")], capture_output=True, text=True, check=True)
        log.append(f"[{i + 1}/2] Building CUDA object CMakeFiles/x.dir/{name}.cu.o\n" + r.stdout + r.stderr)
    # A unit of an earlier build in a kept history log, its object gone.
    log.append("[1/1] Building CUDA object CMakeFiles/x.dir/flash_fwd_gone.cu.o\n"
               + LOG.split("[4/9] Building CUDA object CMakeFiles/flashcore_sm90.dir/src/sm90/instantiations/"
                           "flash_fwd_bf16_d128_m128_n128_s2_nt.cu.o\n")[1])
    r = run(tmp_path, "".join(log), "--objects", str(objects), "--check")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "flash_fwd_gone" not in r.stdout
    assert "SASS: 1 of 1 kernel instantiations without HGMMA or with local-memory instructions." in r.stdout
    got = {row[0]: row for row in rows(r.stdout)}
    planted, other = got["flash_fwd_planted"], got["other"]
    assert planted[7] == "0" and int(planted[8]) > 0  # HGMMA, LDL/STL
    assert int(planted[4]) > 0  # the array's stack frame, as ptxas reported it
    assert other[1] in ("`other`", "`_Z5otherPf`") and other[7:] == ["0", "0", "0", "0"]


def kernel_name(gen, row):
    """The kernel of a summary row: its unit's name (one kernel a unit), or
    in a grouped unit the name of its entry function's KernelTraits."""
    if not row[1]:
        return row[0]
    # (CTAs an SM, the tenth argument, is absent from entries demangled
    # before it existed: one.)
    m = re.search(r"KernelTraits<(bfloat16_t|half_t), (\d+), (\d+), (\d+), (\d+), (true|false), (\d+), "
                  r"(true|false), (true|false)(?:, (\d+))?>", row[1])
    assert m, row
    dt = {"bfloat16_t": "bf16", "half_t": "fp16"}[m.group(1)]
    d, bm, bn, st = (int(x) for x in m.groups()[1:5])
    return gen.name((dt, d, bm, bn, st, m.group(6) == "true", int(m.group(7)), m.group(8) == "true",
                     m.group(9) == "true", int(m.group(10) or 1)))


def test_kernel_names_of_summary_rows(gen_kernels):
    gen = gen_kernels
    assert kernel_name(gen, ["flash_fwd_bf16_d64_m64_n128_s4", ""]) == "flash_fwd_bf16_d64_m64_n128_s4"
    row = ["flash_fwd_d128_m128_n128_s2", "`flash_fwd_kernel<KernelTraits<half_t, 128, 128, 128, 2, false, 2, "
           "false, true> >`"]
    assert kernel_name(gen, row) == "flash_fwd_fp16_d128_m128_n128_s2_c2_nt"
    row = ["flash_fwd_d64_m64_n128_s4", "`flash_fwd_kernel<KernelTraits<bfloat16_t, 64, 64, 128, 2, false, 1, "
           "false, false, 2> >`"]
    assert kernel_name(gen, row) == "flash_fwd_bf16_d64_m64_n128_s2_x2"


def test_the_committed_summary_lists_every_kernel_instantiation(gen_kernels):
    """docs/ptxas-summary.md is the issue's ptxas -v record: a kernel added
    to the one list (tools/gen_sm90_kernels.py) must show up in it, and it
    must not keep rows of kernels that are gone."""
    gen = gen_kernels
    listed = {gen.name(k) for k in gen.KERNELS}
    text = (ROOT / "docs" / "ptxas-summary.md").read_text()
    documented = {kernel_name(gen, row) for row in rows(text) if row[0].startswith("flash_fwd_")}
    assert documented == listed, ("regenerate docs/ptxas-summary.md (tools/ptxas-summary): "
                                  f"missing {sorted(listed - documented)}, stale {sorted(documented - listed)}")
    assert "0 with a stack frame or spills, 0 units with ptxas warnings." in text
    assert "SASS: 0 of " in text



# A kernel with one WGMMA (its descriptors are never valid: it is compiled,
# not run), as clean as an attention kernel for --check.
WGMMA = r"""
__global__ void clean(float* p, unsigned long long da, unsigned long long db) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\nwgmma.fence.sync.aligned;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n"
               "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(1));
  p[threadIdx.x] = d0 + d1 + d2 + d3;
}
"""


def test_objects_count_the_sass_of_each_kernel_of_a_grouped_unit(tmp_path, nvcc):
    """A unit of a tile's kernels (FLASHCORE_GROUPED_UNITS): the SASS counts
    and the check are per entry function, so one bad kernel among clean ones
    is caught and the clean one keeps its own counts."""
    objects = tmp_path / "objects"
    objects.mkdir()

    def build(src):
        cu = tmp_path / "flash_fwd_d64_group.cu"
        cu.write_text(src)
        r = subprocess.run([nvcc, "-c", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", str(cu),
                            "-o", str(objects / "flash_fwd_d64_group.cu.o")], capture_output=True, text=True,
                           check=True)
        return "[1/1] Building CUDA object CMakeFiles/x.dir/flash_fwd_d64_group.cu.o\n" + r.stdout + r.stderr

    r = run(tmp_path, build(PLANTED + WGMMA), "--objects", str(objects), "--check")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].startswith("1 translation units, 2 entry functions: 1 with")
    assert "SASS: 1 of 2 kernel instantiations without HGMMA or with local-memory instructions." in r.stdout
    got = {row[1].strip("`"): row for row in rows(r.stdout)}
    planted = got.get("planted") or got["_Z7plantedPfi"]
    clean = got.get("clean") or got["_Z5cleanPfyy"]
    assert planted[0] == clean[0] == "flash_fwd_d64_group"
    assert planted[7] == "0" and int(planted[8]) > 0  # HGMMA, LDL/STL
    assert clean[7:9] == ["1", "0"]
    # The same object with no report of it in the log (an incremental build
    # that did not recompile it): the SASS columns alone, still per kernel.
    r = run(tmp_path, "[1/1] Building CUDA object CMakeFiles/x.dir/unrelated.cu.o\n"
            + LOG.split("flash_fwd_bf16_d128_m128_n128_s2_nt.cu.o\n")[1], "--objects", str(objects))
    got = rows(r.stdout)
    assert len(got) == 2 and all(row[0] == "flash_fwd_d64_group" and row[2:7] == ["-"] * 5 for row in got), r.stdout
    # Only clean kernels in the unit: --check passes.
    r = run(tmp_path, build(WGMMA), "--objects", str(objects), "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SASS: 0 of 1 kernel instantiations" in r.stdout
