"""What the numbers were measured on: written at the top of the CSV and of
summary.md so a result file is never separated from its context."""

from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
from typing import List, Optional, Tuple


def cuda_available() -> Tuple[bool, str]:
    """(True, '') when torch sees a CUDA device, else (False, why). Kept as a
    function of its own so tests can monkeypatch the 'no GPU' case."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install is also "no GPU"
        return False, f"torch not importable ({type(exc).__name__}: {exc})"
    try:
        if not torch.cuda.is_available():
            return False, "torch.cuda.is_available() is False"
    except Exception as exc:  # noqa: BLE001
        return False, f"torch.cuda.is_available() raised {type(exc).__name__}: {exc}"
    return True, ""


def command_line(argv: Optional[List[str]] = None) -> str:
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", "-m", "flashcore.bench", *args])


def _gpu_selector() -> str:
    """nvidia-smi's id for the GPU torch is using: its PCI address when torch
    exposes it (CUDA_VISIBLE_DEVICES renumbers devices, PCI addresses stay)."""
    try:
        import torch

        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - older torch: fall back to the first GPU
        return "0"


def _nvidia_smi(query: str) -> Optional[str]:
    for selector in dict.fromkeys((_gpu_selector(), "0")):
        try:
            res = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader",
                                  "-i", selector], capture_output=True, text=True, timeout=20)
        except Exception:  # noqa: BLE001 - informational only
            return None
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip()
    return None


def gpu_environment(fc_version: str, argv: Optional[List[str]] = None) -> List[str]:
    """'key: value' lines. Only read-only queries: the card's settings are
    measured as found, never changed."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    lines = [
        f"gpu: {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
        f"{props.total_memory / 2**30:.0f} GiB, L2 {l2_bytes() / 1e6:.0f} MB)",
        f"driver: {_nvidia_smi('driver_version') or 'unknown'}",
        f"power limit / max SM clock: {_nvidia_smi('power.limit,clocks.max.sm') or 'unknown'}",
        f"torch: {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}",
        f"python: {sys.version.split()[0]}",
        f"flashcore: {fc_version}",
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"command: {command_line(argv)}",
    ]
    return lines


def l2_bytes(default: int = 50 * 10**6) -> int:
    try:
        import torch

        v = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
        return v if v > 0 else default
    except Exception:  # noqa: BLE001
        return default


def default_out_dir() -> str:
    """$OUT when set (the remote runner collects it), else bench/results/<date>/."""
    env = os.environ.get("OUT")
    if env:
        return env
    return os.path.join("bench", "results", datetime.date.today().isoformat())
