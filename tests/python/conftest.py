"""pytest setup for the flashcore Python tests.

The tests import the package from wherever PYTHONPATH points (scripts/test
uses <repo>/build/python, the package that the CMake build assembles) or
from an installed wheel. As a convenience for developers, if flashcore is
not importable it falls back to <repo>/build/python.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if importlib.util.find_spec("flashcore") is None:
    _build_pkg = os.path.join(_REPO, "build", "python")
    if os.path.isdir(os.path.join(_build_pkg, "flashcore")):
        sys.path.insert(0, _build_pkg)


@pytest.fixture(scope="session")
def gen_kernels():
    """tools/gen_sm90_kernels.py as a module: the one list of kernel
    instantiations (KERNELS) and their names (name())."""
    path = os.path.join(_REPO, "tools", "gen_sm90_kernels.py")
    spec = importlib.util.spec_from_file_location("gen_sm90_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def nvcc():
    """nvcc from PATH or /usr/local/cuda; the test is skipped without one."""
    import shutil
    cand = "/usr/local/cuda/bin/nvcc"
    path = shutil.which("nvcc") or (cand if os.access(cand, os.X_OK) else None)
    if path is None:
        pytest.skip("nvcc not found: nothing can be compiled here")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
