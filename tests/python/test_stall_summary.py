"""tools/stall-summary.py: shares by stall reason and by opcode, and the
hottest instructions, from an Nsight Compute source-page CSV."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The shape of `ncu --page source --csv --print-source sass`: a preamble line,
# then per-instruction rows; each reason has an all-samples and a not-issued
# column, and only the former counts.
CSV = """\"Kernel Name\",\"flash_fwd_kernel\"
\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",\"Warp Stall Sampling (Not-issued Samples)\",\"Instructions Executed\",\"stall_barrier\",\"stall_wait\",\"stall_barrier (Not Issued)\",\"stall_wait (Not Issued)\"
\"0x10\",\"WARPGROUP.DEPBAR.LE gsb0, 0x0\",\"60\",\"50\",\"100\",\"60\",\"0\",\"50\",\"0\"
\"0x20\",\"@!P0 MUFU.EX2 R1, R1\",\"30\",\"20\",\"6,400\",\"0\",\"30\",\"0\",\"20\"
\"0x30\",\"MUFU.EX2 R2, R2\",\"10\",\"5\",\"6,400\",\"0\",\"10\",\"0\",\"5\"
"""


def test_shares_by_reason_opcode_and_instruction(tmp_path):
    path = tmp_path / "stalls-sass.csv"
    path.write_text(CSV)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "stall-summary.py"), str(path), "2"],
                         check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert "3 instructions, 100 samples" in lines[0]
    # Not-issued columns are left out of the reasons: 60% + 40%, nothing else.
    assert lines[1] == "by reason: stall_barrier 60.0%, stall_wait 40.0%"
    # Predicates are stripped before the opcode is taken.
    assert lines[2] == "by opcode: WARPGROUP.DEPBAR.LE 60.0%, MUFU.EX2 40.0%"
    hottest = lines[4:6]
    assert "0x10  60.0%       100  WARPGROUP.DEPBAR.LE gsb0, 0x0  [stall_barrier 100%]" in hottest[0]
    assert "30.0%      6400  @!P0 MUFU.EX2 R1, R1  [stall_wait 100%]" in hottest[1]
    assert not any("0x30" in line for line in lines[4:-1])  # TOP = 2
