"""tools/gen_sm90_kernels.py: the committed instantiation units are the
generator's output, and the grouped units (CMake's FLASHCORE_GROUPED_UNITS,
which scripts/test builds) hold every kernel exactly once."""
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEN = ROOT / "tools" / "gen_sm90_kernels.py"
UNITS = ROOT / "src" / "sm90" / "instantiations"


def _check(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "tools" / "gen_sm90_kernels.py"), "--check"],
                          capture_output=True, text=True)


def test_committed_units_are_the_generators_output(gen_kernels):
    r = _check(ROOT)
    assert r.returncode == 0, r.stderr
    assert f"({len(gen_kernels.KERNELS)} kernels" in r.stdout


def test_check_fails_on_a_stale_or_extra_unit(tmp_path):
    # A copy of the generator and its output: --check passes there, then
    # fails once a grouped unit is edited, and once an extra unit appears.
    (tmp_path / "tools").mkdir()
    shutil.copy(GEN, tmp_path / "tools")
    shutil.copytree(UNITS, tmp_path / "src" / "sm90" / "instantiations")
    assert _check(tmp_path).returncode == 0
    grouped = sorted((tmp_path / "src" / "sm90" / "instantiations" / "grouped").glob("*.cu"))
    assert grouped
    text = grouped[0].read_text()
    grouped[0].write_text("\n".join(text.splitlines()[:-1]) + "\n")  # drop its last kernel
    r = _check(tmp_path)
    assert r.returncode == 1 and grouped[0].name in r.stderr
    grouped[0].write_text(text)
    (tmp_path / "src" / "sm90" / "instantiations" / "grouped" / "flash_fwd_extra.cu").write_text("")
    r = _check(tmp_path)
    assert r.returncode == 1 and "flash_fwd_extra.cu" in r.stderr


def test_grouped_units_hold_every_kernel_once(gen_kernels):
    gen = gen_kernels
    included = []
    for unit in sorted((UNITS / "grouped").glob("*.cu")):
        members = re.findall(r'^#include "sm90/instantiations/([\w]+)\.cu"$', unit.read_text(), flags=re.M)
        assert members, unit.name
        # One tile a group: the same head dim, rows, keys and stages, and
        # so the same need for CuTe's extended WGMMA widths, which the
        # group's first unit turns on before CuTe's headers are read.
        tiles = {re.sub(r"_(bf16|fp16)_", "_", m) for m in members}
        tiles = {re.sub(r"(_c2)?(_fold)?(_nt)?$", "", t) for t in tiles}
        # A two-CTA kernel (_x2: its own stage count) joins its one-CTA
        # twin's unit, which is named by the twin's stages.
        twin_stages = re.search(r"_s\d+$", unit.stem).group(0)
        tiles = {re.sub(r"_s\d+_x\d+$", twin_stages, t) for t in tiles}
        assert tiles == {unit.stem}, (unit.name, tiles)
        extended = {"CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" in (UNITS / f"{m}.cu").read_text() for m in members}
        assert len(extended) == 1, unit.name
        included += members
    assert sorted(included) == sorted(gen.name(k) for k in gen.KERNELS)
    assert len(included) == len(set(included))
