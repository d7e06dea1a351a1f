"""PyTorch / CuPy / JAX interop and the CUDA backend. Everything here skips
cleanly when the library or a GPU is missing; CI (no GPU) runs none of the
CUDA cases. (torch.library op details: test_torch_op.py.)"""

from __future__ import annotations

import ctypes
import os

# JAX would otherwise grab most of the GPU memory at import, starving the
# PyTorch tests that run in the same process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402
import pytest

import flashcore  # noqa: E402
from reference import attention_ref  # noqa: E402

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
    # v requires grad (float32 case): the output is recorded by autograd, and
    # backward raises (test_torch_op.py); the forward values are unchanged.
    assert out.requires_grad == (dtype == "float32")
    assert _max_err(out.detach().float().numpy(), ref) <= TORCH_TOL[dtype] * 4


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
    cupy = _cupy_cuda()
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


def test_cupy_strided_views_out_and_lse(monkeypatch):
    cupy = _cupy_cuda()
    calls = _spy_native(monkeypatch)
    b, s, h, hkv, d = 2, 96, 8, 2, 64
    rng = np.random.default_rng(4)
    packed = cupy.asarray(rng.standard_normal((b, s, h + 2 * hkv, d)).astype(np.float16))
    q, k, v = packed[:, :, :h], packed[:, :, h:h + hkv], packed[:, :, h + hkv:]
    out, lse = flashcore.attention(q, k, v, causal=True, layout="bshd", return_lse=True)
    assert isinstance(out, cupy.ndarray) and isinstance(lse, cupy.ndarray)
    assert out.dtype == cupy.float16 and lse.dtype == cupy.float32 and lse.shape == (b, h, s)
    ref, ref_lse = attention_ref(*(cupy.asnumpy(x).transpose(0, 2, 1, 3) for x in (q, k, v)),
                                 causal=True)
    assert _max_err(cupy.asnumpy(out).transpose(0, 2, 1, 3), ref) <= 4e-3
    assert np.max(np.abs(cupy.asnumpy(lse) - ref_lse)) <= 1e-3
    # zero copy: the native call saw the views themselves, and wrote the result
    assert calls[-1]["ptrs"][:3] == [q.data.ptr, k.data.ptr, v.data.ptr]
    assert calls[-1]["ptrs"][3] == out.data.ptr
    # out= into a strided view
    big = cupy.zeros((b, s, 2 * h, d), cupy.float16)
    res = flashcore.attention(q, k, v, causal=True, layout="bshd", out=big[:, :, h:])
    assert res.data.ptr == big[:, :, h:].data.ptr
    assert cupy.array_equal(big[:, :, h:], out) and not big[:, :, :h].any()


_SPIN_SRC = r"""
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
"""


def test_cupy_current_stream(monkeypatch):
    cupy = _cupy_cuda()
    calls = _spy_native(monkeypatch)
    try:
        spin = cupy.RawKernel(_SPIN_SRC, "spin")
        spin.compile()
    except Exception as e:  # noqa: BLE001 - no NVRTC here
        pytest.skip(f"cannot compile a CuPy RawKernel: {e}")
    rng = np.random.default_rng(5)
    qn, kn, vn, qn2 = (rng.standard_normal((1, 4, 200, 64)).astype(np.float16) for _ in range(4))
    q, k, v, q2 = (cupy.asarray(x) for x in (qn, kn, vn, qn2))
    cupy.cuda.Device().synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        # a ~100 ms spin, then q is overwritten: flashcore on any other
        # stream would read the old q
        spin((1,), (1,), (np.int64(200_000_000),))
        q[...] = q2
        out = flashcore.attention(q, k, v, causal=True)
    assert calls[-1]["stream"] == s.ptr
    s.synchronize()
    ref, _ = attention_ref(qn2, kn, vn, causal=True)
    assert _max_err(cupy.asnumpy(out), ref) <= 4e-3


# ------------------------------------------------------------------ JAX
def _jax():
    return pytest.importorskip("jax", reason="JAX is not installed")


def _jax_gpu():
    jax = _jax()
    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        devices = []
    if not devices:
        pytest.skip("no GPU visible to JAX")
    if not flashcore.built_with_cuda():
        pytest.skip("flashcore was built without the CUDA backend")
    return jax, devices[0]


def _jax_zero_copy(jax, dev, dtype, layout, monkeypatch):
    """jax.Arrays on `dev` in, new jax.Arrays on `dev` out, matching the
    reference, and no copies: the native call read the caller's buffers and
    wrote the ones that came back, on JAX's stream for external work."""
    import jax.numpy as jnp

    calls = _spy_native(monkeypatch)
    rng = np.random.default_rng(6)
    b, hq, hkv, sq, sk, d = 2, 8, 2, 130, 257, 64
    shapes = [(b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)]
    host = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    if layout == "bshd":
        host = [x.transpose(0, 2, 1, 3).copy() for x in host]
    q, k, v = (jax.device_put(jnp.asarray(x, dtype=getattr(jnp, dtype)), dev) for x in host)
    out, lse = flashcore.attention(q, k, v, causal=True, layout=layout, return_lse=True)
    assert isinstance(out, jax.Array) and isinstance(lse, jax.Array)
    assert out.dtype == q.dtype and out.shape == q.shape and out.devices() == {dev}
    assert lse.dtype == jnp.float32 and lse.shape == (b, hq, sq) and lse.devices() == {dev}

    to_bhsd = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(0, 2, 1, 3))
    ins = [to_bhsd(np.asarray(x.astype(jnp.float32))) for x in (q, k, v)]
    ref, ref_lse = attention_ref(*ins, causal=True)
    got = to_bhsd(np.asarray(out.astype(jnp.float32)))
    assert _max_err(got, ref) <= TORCH_TOL[dtype]
    assert np.max(np.abs(np.asarray(lse) - ref_lse)) <= 1e-3

    assert len(calls) == 1
    assert calls[0]["ptrs"][:3] == [x.unsafe_buffer_pointer() for x in (q, k, v)]
    assert calls[0]["ptrs"][3] == out.unsafe_buffer_pointer()
    assert calls[0]["lse_ptr"] == lse.unsafe_buffer_pointer()
    # JAX hands out one of a pool of streams for external work (a different
    # one per request on the H100), so only check that it is one of them and
    # not the legacy default stream.
    if dev.platform == "cpu":
        assert calls[0]["stream"] == 0
    else:
        assert calls[0]["stream"] != 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_jax_cuda_zero_copy(dtype, layout, monkeypatch):
    jax, dev = _jax_gpu()
    _jax_zero_copy(jax, dev, dtype, layout, monkeypatch)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_jax_cpu_zero_copy(dtype, layout, monkeypatch):
    jax = _jax()
    _jax_zero_copy(jax, jax.devices("cpu")[0], dtype, layout, monkeypatch)


def test_jax_cuda_waits_for_inputs():
    """q comes out of a long JAX computation that is still running when
    flashcore is called (JAX dispatches asynchronously): the kernel must wait
    for it (DLPack stream protocol), not read the buffer's old contents."""
    jax, dev = _jax_gpu()
    import jax.numpy as jnp

    rng = np.random.default_rng(8)
    kn, vn = (rng.standard_normal((1, 4, 2048, 64)).astype(np.float16) for _ in range(2))
    k, v = (jax.device_put(jnp.asarray(x), dev) for x in (kn, vn))
    x0, w = (jax.device_put(jnp.asarray(rng.standard_normal(sh).astype(np.float32) / 32), dev)
             for sh in ((2048, 1024), (1024, 1024)))

    @jax.jit
    def slow_q(x, w):
        x = jax.lax.fori_loop(0, 400, lambda _, x: jnp.tanh(x @ w + x), x)
        return x.reshape(1, 16, 2048, 64).astype(jnp.float16)

    jax.block_until_ready(slow_q(x0, w))  # compiled: the next call only dispatches
    q = slow_q(x0, w)
    out = flashcore.attention(q, k, v, causal=True)
    ref, _ = attention_ref(np.asarray(q), kn, vn, causal=True)
    assert _max_err(np.asarray(out), ref) <= 4e-3


def test_jax_errors():
    """Immutable arrays (no out=), JAX's own stream (no stream=), eager only,
    one array library per call, and flashcore.attention only."""
    jax = _jax()
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    q = jnp.zeros((1, 2, 8, 64), jnp.float32, device=cpu)
    with pytest.raises(TypeError, match=r"out: JAX arrays are immutable"):
        flashcore.attention(q, q, q, out=jnp.zeros_like(q))
    with pytest.raises(TypeError, match=r"stream: must be None for JAX"):
        flashcore.attention(q, q, q, stream=0)
    with pytest.raises(TypeError, match=r"same array library"):
        flashcore.attention(q, np.zeros((1, 2, 8, 64), np.float32), q)
    with pytest.raises(TypeError, match=r"q: is a traced JAX value"):
        jax.jit(lambda x: flashcore.attention(x, q, q))(q)
    with pytest.raises(TypeError, match=r"flashcore.attention only"):
        flashcore.attention_with_kvcache(q, q, q, np.zeros(1, np.int32), layout="bhsd")
    with pytest.raises(TypeError, match=r"flashcore.attention only"):
        flashcore.attention_varlen(q[0], q[0], q[0], [0, 2], [0, 2], 2, 2)


# ------------------------------------------------------------------ helpers
def _cupy_cuda():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device visible to CuPy")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device visible to CuPy")
    if not flashcore.built_with_cuda():
        pytest.skip("flashcore was built without the CUDA backend")
    return cupy


def _dev_ptr(x) -> int:
    """Address of the first element of a device array or DLPack capsule."""
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    if hasattr(x, "unsafe_buffer_pointer"):
        return int(x.unsafe_buffer_pointer())
    if type(x).__name__ == "PyCapsule":
        api = ctypes.pythonapi
        api.PyCapsule_GetName.restype = ctypes.c_char_p
        api.PyCapsule_GetName.argtypes = [ctypes.py_object]
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        name = api.PyCapsule_GetName(x)
        base = api.PyCapsule_GetPointer(x, name)
        # DLTensor: data at +0, byte_offset at +40; a versioned managed tensor
        # starts with version, manager_ctx, deleter, flags (32 bytes).
        tensor = base + (32 if name == b"dltensor_versioned" else 0)
        data = ctypes.c_void_p.from_address(tensor).value or 0
        return data + ctypes.c_uint64.from_address(tensor + 40).value
    raise AssertionError(f"cannot tell where {type(x)} lives")


def _spy_native(monkeypatch):
    """Records the device addresses (and stream) of every native call."""
    calls = []
    real = flashcore._C.attention_forward

    def spy(q, k, v, out, lse, **kw):
        calls.append(dict(ptrs=[_dev_ptr(t) for t in (q, k, v, out)],
                          lse_ptr=None if lse is None else _dev_ptr(lse),
                          stream=kw.get("stream")))
        return real(q, k, v, out, lse, **kw)

    monkeypatch.setattr(flashcore._C, "attention_forward", spy)
    return calls
