"""PyTorch / CuPy interop and the CUDA backend. Everything here skips
cleanly when the library or a GPU is missing; CI (no GPU) runs none of the
CUDA cases."""

from __future__ import annotations

import numpy as np
import pytest

import flashcore
from reference import attention_ref

TORCH_TOL = {"float32": 2e-3, "float16": 4e-3, "bfloat16": 3e-2}


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def _torch_cuda():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    if not flashcore.built_with_cuda():
        pytest.skip("flashcore was built without the CUDA backend")
    return torch


def _max_err(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)))


# ------------------------------------------------------------------ torch CPU
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_cpu(dtype):
    torch = _torch()
    g = torch.Generator().manual_seed(0)
    tdt = getattr(torch, dtype)
    q = torch.randn(1, 8, 33, 64, generator=g).to(tdt)
    k = torch.randn(1, 2, 40, 64, generator=g).to(tdt)
    v = torch.randn(1, 2, 40, 64, generator=g).to(tdt).requires_grad_(dtype == "float32")
    out, lse = flashcore.attention(q, k, v, causal=True, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == tdt and out.device == q.device
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (1, 8, 33)
    ref, ref_lse = attention_ref(
        q.float().numpy(), k.float().numpy(), v.detach().float().numpy(), causal=True
    )
    assert _max_err(out.float().numpy(), ref) <= TORCH_TOL[dtype] * 4


def test_torch_mixed_with_numpy_is_type_error():
    torch = _torch()
    q = torch.zeros(1, 2, 8, 32)
    with pytest.raises(TypeError, match=r"same array library"):
        flashcore.attention(q, np.zeros((1, 2, 8, 32), np.float32), q)


# ------------------------------------------------------------------ torch CUDA
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_torch_cuda_matches_reference(dtype, causal, layout):
    torch = _torch_cuda()
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    b, hq, hkv, sq, sk, d = 2, 8, 2, 257, 300, 128
    if layout == "bhsd":
        shp_q, shp_kv = (b, hq, sq, d), (b, hkv, sk, d)
    else:
        shp_q, shp_kv = (b, sq, hq, d), (b, sk, hkv, d)
    q = torch.randn(shp_q, device="cuda", dtype=tdt, generator=g)
    k = torch.randn(shp_kv, device="cuda", dtype=tdt, generator=g)
    v = torch.randn(shp_kv, device="cuda", dtype=tdt, generator=g)
    try:
        out, lse = flashcore.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    except (TypeError, NotImplementedError) as e:  # kernel not there yet for this case
        pytest.skip(f"CUDA backend does not support this case yet: {e}")
    torch.cuda.synchronize()
    assert out.is_cuda and out.dtype == tdt
    to_bhsd = (lambda t: t) if layout == "bhsd" else (lambda t: t.transpose(1, 2))
    ref, ref_lse = attention_ref(
        *(to_bhsd(t).float().cpu().numpy() for t in (q, k, v)), causal=causal
    )
    assert _max_err(to_bhsd(out).float().cpu().numpy(), ref) <= TORCH_TOL[dtype]
    fin = np.isfinite(ref_lse)
    assert np.max(np.abs(lse.cpu().numpy()[fin] - ref_lse[fin])) <= 1e-3


def test_torch_cuda_deterministic():
    torch = _torch_cuda()
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, 4, 512, 64, device="cuda", dtype=torch.float16, generator=g)
               for _ in range(3))
    try:
        a = flashcore.attention(q, k, v, causal=True)
    except (TypeError, NotImplementedError) as e:
        pytest.skip(f"CUDA backend does not support this case yet: {e}")
    b = flashcore.attention(q, k, v, causal=True)
    assert torch.equal(a, b)


# ------------------------------------------------------------------ CuPy
def test_cupy_cuda():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device visible to CuPy")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device visible to CuPy")
    if not flashcore.built_with_cuda():
        pytest.skip("flashcore was built without the CUDA backend")
    rng = np.random.default_rng(0)
    qn, kn, vn = (rng.standard_normal((1, 4, 130, 64)).astype(np.float16) for _ in range(3))
    q, k, v = (cupy.asarray(x) for x in (qn, kn, vn))
    try:
        out = flashcore.attention(q, k, v)
    except (TypeError, NotImplementedError) as e:
        pytest.skip(f"CUDA backend does not support this case yet: {e}")
    assert isinstance(out, cupy.ndarray)
    ref, _ = attention_ref(qn, kn, vn)
    assert _max_err(cupy.asnumpy(out), ref) <= 4e-3
