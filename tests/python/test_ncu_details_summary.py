"""tools/variant-ab/ncu_details_summary.py: a line per kernel from Nsight
Compute's text details, each cuDNN kernel's cycles against the flashcore
kernel profiled before it."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

FC = ("void flashcore::flash_fwd_kernel<flashcore::KernelTraits<cutlass::bfloat16_t, 128, 128, 128, 2, 0, 2, 0, 1>>"
      "(flashcore::KernelParams<T1>)")
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"


def _kernel(name, cycles, duration, wait, mio, unit="us"):
    # The layout `ncu --page details --print-details all` prints (a
    # section table, then the warp-state table; a metric named twice keeps
    # its first value).
    return f"""  {name} (132, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    SM Frequency                    Ghz         1.42
    Elapsed Cycles                cycle      {cycles:,}
    DRAM Throughput                   %        46.42
    Duration                         {unit}       {duration}
    ----------------------- ----------- ------------

    Table Name : Warp State (All Cycles)
    Stall Wait                      inst         {wait}
    Stall MIO Throttle              inst         {mio}
    Stall Wait                      inst         9.99
"""


def _summary(tmp_path, text):
    """The script's output lines for a details file holding `text`."""
    path = tmp_path / "details.txt"
    path.write_text(text)
    return subprocess.run([sys.executable, str(ROOT / "tools" / "variant-ab" / "ncu_details_summary.py"), str(path)],
                          check=True, capture_output=True, text=True).stdout.splitlines()


def test_one_line_a_kernel_and_cudnn_against_flashcore(tmp_path):
    text = "[1157] python3.12@127.0.0.1\n" + _kernel(FC, 200000, "150.00", 1.30, 0.28) + \
        _kernel(CUDNN, 190000, "142.50", 0.89, 0.05)
    out = _summary(tmp_path, text)
    assert len(out) == 3, out
    fc, cu = out[1].split(), out[2].split()
    assert out[1].startswith("flashcore d128 m128 n128 c2 nt")
    assert out[2].startswith("cudnn 64x128x128")
    # us, SM GHz, cycles, DRAM %, L2 hit % (absent), issue % (absent), wait, barrier (absent), long sb, mio
    assert fc[-10:] == ["150", "1.42", "200000", "46.42", "-", "-", "1.3", "-", "-", "0.28"]
    assert cu[-11:] == ["142.5", "1.42", "190000", "46.42", "-", "-", "0.89", "-", "-", "0.05", "-5.0%"]


def test_long_kernels_in_microseconds_and_whole_cycles(tmp_path):
    # ncu prints a 3 ms kernel's duration in ms and its cycles above a
    # million; the columns stay apart and in their units.
    text = _kernel(FC, 5346060, "3.06", 1.84, 0.14, unit="ms") + _kernel(CUDNN, 5452178, "3.20", 0.89, 0.02, unit="ms")
    out = _summary(tmp_path, text)
    fc, cu = out[1].split(), out[2].split()
    assert fc[-10:] == ["3060", "1.42", "5346060", "46.42", "-", "-", "1.84", "-", "-", "0.14"]
    assert cu[-11:] == ["3200", "1.42", "5452178", "46.42", "-", "-", "0.89", "-", "-", "0.02", "+2.0%"]
