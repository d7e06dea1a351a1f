"""The CUDA path of flashcore._C, driven with raw DLPack capsules of device
memory (tests/python/cuda_dlpack.py): no PyTorch or CuPy needed. Skips
without cuda-python, without a CUDA device, or when flashcore was built
without CUDA."""

from __future__ import annotations

import numpy as np
import pytest

import flashcore
from flashcore import _C
from reference import attention_ref

pytest.importorskip("cuda.bindings", reason="cuda-python (cuda.bindings) is not installed")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cuda_dlpack  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not flashcore.built_with_cuda(), reason="flashcore was built without CUDA"),
    pytest.mark.skipif(cuda_dlpack.device_count() == 0, reason="no CUDA device found"),
]

NP_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TOL = {"float16": 4e-3, "bfloat16": 3e-2}


def _run(dtype, b, hq, hkv, sq, sk, d, *, causal=False, window=(-1, -1), bshd=False, lse=True,
         seed=0):
    rng = np.random.default_rng(seed)
    dt = NP_DTYPES[dtype]
    q = rng.standard_normal((b, hq, sq, d)).astype(dt)
    k = rng.standard_normal((b, hkv, sk, d)).astype(dt)
    v = rng.standard_normal((b, hkv, sk, d)).astype(dt)
    if bshd:  # device memory in (B, S, H, D) order
        host = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)]
    else:
        host = [q, k, v]
    as_u16 = dtype == "bfloat16"
    dev = [cuda_dlpack.DeviceArray(x.view(np.uint16) if as_u16 else x, dtype) for x in host]
    out_host = np.zeros(host[0].shape[:3] + (d,), dtype=dt)
    dout = cuda_dlpack.DeviceArray(out_host.view(np.uint16) if as_u16 else out_host, dtype)
    dlse = cuda_dlpack.DeviceArray(np.zeros((b, hq, sq), np.float32)) if lse else None
    _C.attention_forward(
        dev[0].capsule(), dev[1].capsule(), dev[2].capsule(), dout.capsule(),
        dlse.capsule() if lse else None,
        causal=causal, window_left=window[0], window_right=window[1], bshd=bshd, stream=0)
    cuda_dlpack.synchronize()
    out = dout.to_host()
    if as_u16:
        out = out.view(ml_dtypes.bfloat16)
    if bshd:
        out = out.transpose(0, 2, 1, 3)
    ref, ref_lse = attention_ref(q, k, v, causal=causal, window=window)
    err = float(np.max(np.abs(out.astype(np.float64) - ref)))
    assert err <= TOL[dtype], f"max abs error {err:.3e}"
    if lse:
        got_lse = dlse.to_host()
        fin = np.isfinite(ref_lse)
        assert np.array_equal(np.isneginf(got_lse), ~fin)
        assert float(np.max(np.abs(got_lse[fin] - ref_lse[fin]), initial=0.0)) <= 1e-3
    # and the CPU backend on the same inputs agrees
    cpu = flashcore.attention(q, k, v, causal=causal, window=window)
    assert float(np.max(np.abs(cpu.astype(np.float64) - out.astype(np.float64)))) <= 2 * TOL[dtype]
    return out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_basic(dtype, d, causal):
    _run(dtype, 2, 4, 4, 257, 257, d, causal=causal)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_gqa_bshd_uneven(dtype):
    _run(dtype, 2, 8, 2, 129, 300, 128, causal=True, bshd=True)


@pytest.mark.parametrize("d", [96, 256])
def test_cuda_head_dims(d):
    _run("float16", 1, 2, 2, 200, 333, d, causal=True)


def test_cuda_window_and_short_rows():
    _run("float16", 1, 4, 2, 300, 100, 64, causal=True)  # rows with no key
    _run("bfloat16", 1, 4, 4, 517, 517, 128, window=(100, 0))
    _run("float16", 1, 2, 2, 1, 1000, 64, causal=True)  # one query row (decode-like)


def test_cuda_deterministic():
    a = _run("float16", 1, 8, 8, 1024, 1024, 128, causal=True, seed=3)
    b = _run("float16", 1, 8, 8, 1024, 1024, 128, causal=True, seed=3)
    assert a.tobytes() == b.tobytes()


def test_cuda_float32_is_type_error():
    x = cuda_dlpack.DeviceArray(np.zeros((1, 2, 64, 64), np.float32))
    o = cuda_dlpack.DeviceArray(np.zeros((1, 2, 64, 64), np.float32))
    with pytest.raises(TypeError, match=r"float32"):
        _C.attention_forward(x.capsule(), x.capsule(), x.capsule(), o.capsule(), None)


def test_cuda_mixed_devices_is_value_error():
    x = cuda_dlpack.DeviceArray(np.zeros((1, 2, 64, 64), np.float16))
    host = np.zeros((1, 2, 64, 64), np.float16)
    with pytest.raises(ValueError, match=r"device"):
        _C.attention_forward(x.capsule(), host, x.capsule(), np.empty_like(host), None)


def test_foreign_dlpack_object_rejected_by_python_layer():
    x = cuda_dlpack.DeviceArray(np.zeros((1, 2, 64, 64), np.float16))

    class Foreign:  # some DLPack producer flashcore cannot allocate for
        ndim = 4

        def __dlpack__(self, stream=None):
            return x.capsule()

    with pytest.raises(TypeError, match=r"not supported"):
        flashcore.attention(Foreign(), Foreign(), Foreign())
