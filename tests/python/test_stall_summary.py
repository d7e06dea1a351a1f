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


def _row(addr, ins, samples, executed):
    return f'"{addr:#x}","{ins}","{samples}","0","{executed}","0","{samples}","0","0"\n'


def test_phases_split_the_key_loop_by_landmarks(tmp_path):
    # A ping-pong iteration in the order ptxas emits it, executed 6,400 times,
    # 64 filler instructions so the group counts as the loop; a spin loop
    # executed more often but short, and a prologue outside the loop.
    head = CSV.splitlines()[0] + "\n" + CSV.splitlines()[1] + "\n"
    rows, a = [], 0x100
    loop = [("BAR.SYNC.DEFER_BLOCKING R2, 0x100", 7), ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ", 5),
            ("HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR20].tnspB, R88", 4),
            ("WARPGROUP.DEPBAR.LE gsb0, 0x1", 11), ("@P0 BRA P1, 0x2000", 2), ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 13),
            ("FMNMX.FTZ R2, R24, R191, !PT", 12), ("MUFU.EX2 R24, R24", 10), ("FADD.FTZ R1, R1, R24", 8),
            ("@!P0 MUFU.EX2 R25, R25", 10)]
    loop += [("FMUL.FTZ R88, R88, R9", 0)] * 62 + [("BRA 0x100", 18)]
    for ins, s in loop:
        rows.append(_row(a, ins, s, "6,400"))
        a += 0x10
    rows += [_row(a, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R24", 500, "99,999"),
             _row(a + 0x10, "@!P0 BRA 0x900", 0, "99,999"), _row(a + 0x20, "MUFU.EX2 R1, R1", 40, "1")]
    path = tmp_path / "loop-sass.csv"
    path.write_text(head + "".join(rows))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "stall-summary.py"), "--phases", str(path)],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[0] == "key loop: 73 instructions, 100 samples (15.6% of the kernel's)"
    shares = {line[:32].strip(): line[32:].split("%")[0].strip() for line in out[1:]}
    assert shares == {"turn and K/V waits": "7.0", "issuing the products": "9.0", "wait for S": "11.0",
                      "mask checks": "2.0", "wait for P·V": "13.0", "row maxima and shuffles": "12.0",
                      "exponential stream": "28.0", "O rescale, P conversion, loop": "18.0"}
    # The predicated last MUFU.EX2 closes the exponential stream.
    assert "exponential stream" in out[7] and "(3 instructions)" in out[7]


def test_phases_without_landmarks_fail(tmp_path):
    path = tmp_path / "flat-sass.csv"
    path.write_text(CSV)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "stall-summary.py"), "--phases", str(path)],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "landmarks not found" in run.stdout
