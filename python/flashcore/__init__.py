"""flashcore: exact attention ``softmax(Q @ K^T * scale) @ V``.

One function, :func:`attention`, runs on host arrays (the CPU reference
backend) and on CUDA arrays (the Hopper sm_90a kernels, when the native
library was built with CUDA). Arrays are taken through DLPack without
copies; outputs are allocated with the caller's array library.

Supported array libraries: NumPy (float32, float16 and
``ml_dtypes.bfloat16``), PyTorch, CuPy and JAX (``jax.Array`` on one CPU or
GPU device; :func:`attention` only, not the serving entry points). PyTorch,
CuPy and JAX are imported only if the caller already uses them.

JAX arrays are immutable: for them :func:`attention` returns new
``jax.Array`` objects (allocated by JAX, written by the kernel, no copy) and
refuses ``out=``. It cannot be traced (``jax.jit``, ``vmap``, ``grad``):
call it on concrete arrays. On the GPU it runs on the stream JAX sets aside
for external work, ordered after the computations that produced the inputs
through the DLPack stream protocol, and returns once the kernel has
finished.

Masking is aligned to the bottom-right corner when ``seqlen_q != seqlen_k``:
query row ``i`` sits at key position ``i + (seqlen_k - seqlen_q)`` and may
attend key ``j`` iff ``j >= i + (seqlen_k - seqlen_q) - window_left`` (when
``window_left >= 0``) and ``j <= i + (seqlen_k - seqlen_q) + window_right``
(when ``window_right >= 0``); ``causal=True`` is ``window_right = 0``. A row
with no allowed key outputs zeros and LSE ``-inf``.

Errors: invalid arguments raise ``ValueError``; unsupported dtypes, devices,
array types or configurations raise ``TypeError``; CUDA and internal errors
raise ``RuntimeError``. Messages name the offending argument.
"""

from __future__ import annotations

import math
import operator
import sys

import numpy as np

try:
    from . import _C
except ImportError as _e:  # pragma: no cover - depends on how it was built
    raise ImportError(
        "flashcore's native extension (flashcore._C) could not be imported: "
        f"{_e}. Build it with `pip install .` or with CMake "
        "(-DFLASHCORE_BUILD_PYTHON=ON) and put <build>/python on PYTHONPATH."
    ) from _e

__all__ = ["attention", "version", "built_with_cuda", "__version__"]

__version__ = _C.version()


def version() -> str:
    """The native library's version, ``"MAJOR.MINOR.PATCH"``."""
    return _C.version()


def built_with_cuda() -> bool:
    """True when the native library contains the CUDA (sm_90a) backend."""
    return bool(_C.built_with_cuda())


_LAYOUTS = ("bhsd", "bshd")
_torch_ops = None  # flashcore.torch_ops, once a call with torch tensors imported it
_NUMPY_DTYPES = ("float32", "float16", "bfloat16")


# ----------------------------------------------------------------- helpers
def _array_library(x) -> str | None:
    """Which array library `x` belongs to: 'numpy', 'torch', 'cupy', 'jax',
    'dlpack' (some other DLPack producer) or None (not an array)."""
    if isinstance(x, np.ndarray):
        return "numpy"
    # A torch tensor, CuPy or JAX array can only exist if its module is
    # loaded, so look in sys.modules instead of importing the (optional)
    # libraries.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        return "cupy"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, jax.Array):  # tracers too: see _check_jax
        return "jax"
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    return None


def _type_name(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _check_array(name: str, x, lib: str | None = None, *, jax_ok: bool = False) -> str:
    """The array library of `x` (the same as `lib` when given), after the
    checks all entry points share. JAX arrays only where `jax_ok`."""
    found = _array_library(x)
    if found is None:
        raise TypeError(
            f"{name}: expected an array (NumPy, PyTorch, CuPy or JAX), got {_type_name(x)}"
        )
    if found == "dlpack":
        raise TypeError(
            f"{name}: arrays of type {_type_name(x)} are not supported yet; "
            "flashcore.attention allocates outputs with NumPy, PyTorch, CuPy or JAX"
        )
    if lib is not None and found != lib:
        raise TypeError(
            f"{name}: is a {found} array but q is a {lib} array; "
            "q, k, v and out must come from the same array library"
        )
    if found == "jax":
        _check_jax(name, x, jax_ok)
    if x.ndim != 4:
        raise ValueError(
            f"{name}: expected a 4-d array (batch, heads, seqlen, head_dim) or "
            f"(batch, seqlen, heads, head_dim), got shape {tuple(x.shape)}"
        )
    if found == "numpy" and x.dtype.name not in _NUMPY_DTYPES:
        raise TypeError(
            f"{name}: unsupported dtype {x.dtype.name}; flashcore supports "
            "float32, float16 and bfloat16 (ml_dtypes.bfloat16 for NumPy)"
        )
    return found


def _check_jax(name: str, x, jax_ok: bool) -> None:
    jax = sys.modules["jax"]
    if isinstance(x, jax.core.Tracer):
        raise TypeError(
            f"{name}: is a traced JAX value (inside jax.jit, vmap, grad, ...); "
            "flashcore.attention runs eagerly on concrete jax.Arrays: call it "
            "outside the transformation"
        )
    if not jax_ok:
        raise TypeError(
            f"{name}: JAX arrays are taken by flashcore.attention only, not (yet) by this function"
        )
    if len(x.devices()) != 1:
        raise TypeError(
            f"{name}: is sharded over {len(x.devices())} devices; flashcore takes "
            "JAX arrays that live on one device"
        )


def _jax_device(x):
    (device,) = x.devices()
    return device


def _jax_dlpack(x, stream: int):
    """A DLPack capsule of JAX array `x` (None stays None). With a stream (the
    DLPack stream protocol), JAX makes that stream wait until `x` is written,
    without blocking the host; without one (CPU), JAX waits on the host."""
    return None if x is None else x.__dlpack__(stream=stream or None)


class _JaxWritten:
    """`x` for jax.dlpack.from_dlpack, which then returns a new jax.Array on
    the same buffer (no copy) that JAX considers written once the work queued
    so far on its stream for external work (the kernel's: _current_stream)
    has run. (Wrapped, so that JAX cannot short-cut one of its own arrays.)"""

    def __init__(self, x):
        self._x = x

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()

    def __dlpack__(self, *, stream=None, **_):
        return _jax_dlpack(self._x, stream)


def _jax_results(*arrays):
    """The JAX arrays flashcore just wrote (None stays None), as arrays that
    JAX orders after the kernel. Then waits for the kernel: JAX does not know
    that flashcore's stream still reads the inputs, and could hand their
    memory to its own computations as soon as the caller drops them."""
    jax = sys.modules["jax"]
    results = tuple(None if x is None else jax.dlpack.from_dlpack(_JaxWritten(x)) for x in arrays)
    return jax.block_until_ready(results)


def _window_edge(name: str, value) -> int:
    if value is None:
        return -1
    if isinstance(value, bool):
        raise TypeError(f"window: {name} edge must be an int or None, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(
            f"window: {name} edge must be an int or None, got {_type_name(value)}"
        ) from None
    if value < -1:
        raise ValueError(f"window: {name} edge must be >= 0, or -1/None for unbounded; got {value}")
    return value


def _parse_window(window) -> tuple[int, int]:
    if window is None:
        return -1, -1
    if isinstance(window, (str, bytes)) or not hasattr(window, "__len__"):
        raise TypeError(
            f"window: expected a (left, right) tuple or None, got {_type_name(window)}"
        )
    if len(window) != 2:
        raise ValueError(f"window: expected a (left, right) pair, got {len(window)} values")
    return _window_edge("left", window[0]), _window_edge("right", window[1])


def _non_negative_int(name: str, value, what: str = "an int") -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected {what}, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected {what}, got {_type_name(value)}") from None
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")
    return value


def _block(name: str, value) -> int:
    """A kernel override: None (0) lets dispatch choose."""
    if value is None:
        return 0
    value = _non_negative_int(name, value, "an int or None")
    if value >= 2**31:
        raise ValueError(f"{name}: must be < 2**31, got {value}")
    return value


def _scale(scale) -> float:
    """The softmax scale as the native side takes it (0: 1/sqrt(head_dim))."""
    if scale is None:
        return 0.0
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"scale: expected a float or None, got {_type_name(scale)}") from None
    if not math.isfinite(value):
        raise ValueError(f"scale: must be finite, got {value}")
    if value < 0:
        raise ValueError(f"scale: must not be negative, got {value}")
    return value


def _stream(lib: str, q, stream) -> int:
    """The cudaStream_t to run on: the caller's, else the library's current one."""
    if stream is None:
        return _current_stream(lib, q)
    if lib == "jax":
        raise TypeError(
            "stream: must be None for JAX arrays; flashcore runs them on the "
            "stream JAX sets aside for external work"
        )
    try:
        return operator.index(stream)
    except TypeError:
        raise TypeError(f"stream: expected an int, got {_type_name(stream)}") from None


def _numpy_native(x):
    """NumPy cannot export ml_dtypes.bfloat16 through DLPack; hand the native
    side a uint16 view of the same memory (no copy) and say it is bfloat16."""
    if x.dtype.name == "bfloat16":
        return x.view(np.uint16), True
    return x, False


def _allocate(lib: str, like, shape, dtype_like: bool):
    """Empty array of `shape` in `like`'s library and device: with `like`'s
    dtype when dtype_like, else float32."""
    if lib == "numpy":
        return np.empty(shape, dtype=like.dtype if dtype_like else np.float32)
    if lib == "torch":
        torch = sys.modules["torch"]
        return torch.empty(
            shape, dtype=like.dtype if dtype_like else torch.float32, device=like.device
        )
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=like.dtype if dtype_like else cupy.float32)
    if lib == "jax":
        # (jnp.empty fills zeros; the kernel's stream waits for that fill.)
        jnp = sys.modules["jax"].numpy
        return jnp.empty(
            shape, dtype=like.dtype if dtype_like else jnp.float32, device=_jax_device(like)
        )
    raise TypeError(f"cannot allocate arrays for library {lib!r}")  # unreachable


def _current_stream(lib: str, q) -> int:
    if lib == "torch" and q.is_cuda:
        torch = sys.modules["torch"]
        return int(torch.cuda.current_stream(q.device).cuda_stream)
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        with q.device:
            return int(cupy.cuda.get_current_stream().ptr)
    if lib == "jax":
        # JAX has no current stream. This is the one it sets aside for work
        # outside JAX: its DLPack exports can make it wait for JAX's
        # computations, and jax.dlpack.from_dlpack records on it when an
        # imported array is ready (see _jax_dlpack and _JaxWritten).
        device = _jax_device(q)
        if device.platform == "cpu":
            return 0
        try:
            return int(device.get_stream_for_external_ready_events())
        except sys.modules["jax"].errors.JaxRuntimeError as e:
            raise TypeError(
                f"q: JAX does not give out a stream for external work on {device} "
                f"({e}); flashcore cannot order its kernel after JAX's"
            ) from None
    return 0


# ----------------------------------------------------------------- public API
def attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    window=None,
    layout: str = "bhsd",
    return_lse: bool = False,
    out=None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_splits: int | None = None,
    stream: int | None = None,
):
    """Exact attention ``softmax(q @ k^T * scale) @ v``.

    Args:
      q: (B, Hq, Sq, D) array (layout "bhsd") or (B, Sq, Hq, D) ("bshd").
      k, v: (B, Hkv, Sk, D) arrays (or (B, Sk, Hkv, D)); Hq % Hkv == 0 (GQA/MQA).
        q, k, v share one dtype: float32, float16 or bfloat16, and one device.
      causal: bottom-right aligned causal mask (see the module docstring).
      scale: softmax scale, not negative; None (or 0) means 1/sqrt(D).
      window: (left, right) sliding window; -1 or None for an unbounded edge.
      layout: "bhsd" or "bshd": how the 4 axes of q, k, v and out are read.
        Strided views are fine in either layout; nothing is copied.
      return_lse: also return the log-sum-exp (natural log) of each row's
        scaled scores, float32, shaped (B, Hq, Sq).
      out: optional output array (same shape, dtype, device and library as the
        result would have); written in place and returned. Not for JAX
        arrays, which are immutable (TypeError).
      block_m, block_n, num_splits: kernel configuration overrides for the
        CUDA backend; None lets dispatch choose.
      stream: cudaStream_t as an int; default: PyTorch's / CuPy's current
        stream for CUDA tensors, else 0. Ignored for host arrays. Must be None
        for JAX arrays (GPU ones run on JAX's stream for external work).

    Returns:
      out, or (out, lse) when return_lse: arrays of q's library on q's
      device (new jax.Arrays for JAX, returned once they are written).

    Raises:
      TypeError: not an array, unsupported array library, dtype or device.
      ValueError: bad shapes, layout, window, scale or configuration.
      RuntimeError: CUDA or internal error.
    """
    global _torch_ops
    if (_torch_ops is not None and window is None and block_m is None and block_n is None
            and num_splits is None and stream is None):
        # The common eager PyTorch call: a few microseconds of host time
        # (torch_ops._eager); anything it does not take goes the general way.
        res = _torch_ops._eager(q, k, v, out, causal, scale, layout, return_lse)
        if res is not None:
            return res
    if not isinstance(layout, str):
        raise TypeError(f"layout: expected 'bhsd' or 'bshd', got {_type_name(layout)}")
    layout_key = layout.lower()
    if layout_key not in _LAYOUTS:
        raise ValueError(f"layout: expected 'bhsd' or 'bshd', got {layout!r}")
    bshd = layout_key == "bshd"

    lib = _check_array("q", q, jax_ok=True)
    _check_array("k", k, lib, jax_ok=True)
    _check_array("v", v, lib, jax_ok=True)
    if out is not None:
        _check_array("out", out, lib, jax_ok=True)
        if lib == "jax":
            raise TypeError(
                "out: JAX arrays are immutable, so flashcore cannot write into one; "
                "leave out=None and use the returned jax.Array"
            )

    scale_value = _scale(scale)
    window_left, window_right = _parse_window(window)
    cfg = (_block("block_m", block_m), _block("block_n", block_n), _block("num_splits", num_splits))

    if lib == "torch":
        # PyTorch tensors go through the torch.library custom op
        # (flashcore/torch_ops.py: torch.compile, CUDA graphs, current stream,
        # a clear error on backward). With out=, the result is written into
        # out (a mutating op; copied into it only when autograd records).
        from . import torch_ops

        _torch_ops = torch_ops  # from now on, attention() tries torch_ops._eager first
        return torch_ops._call(
            q, k, v, out=out, causal=bool(causal), scale=scale_value,
            window_left=window_left, window_right=window_right, bshd=bshd,
            return_lse=bool(return_lse), block_m=cfg[0], block_n=cfg[1],
            num_splits=cfg[2], stream=stream,
        )

    # (B, Hq, Sq) in the caller's axis order
    if bshd:
        batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    else:
        batch, heads_q, seqlen_q = q.shape[0], q.shape[1], q.shape[2]
    stream_value = _stream(lib, q, stream)
    if out is None:
        out = _allocate(lib, q, tuple(q.shape[:3]) + (v.shape[3],), dtype_like=True)
    lse = _allocate(lib, q, (batch, heads_q, seqlen_q), dtype_like=False) if return_lse else None

    as_bf16 = False
    nlse = lse
    if lib == "numpy":
        nq, b0 = _numpy_native(q)
        nk, b1 = _numpy_native(k)
        nv, b2 = _numpy_native(v)
        nout, b3 = _numpy_native(out)
        as_bf16 = b0 or b1 or b2 or b3
    elif lib == "jax":
        nq, nk, nv, nout, nlse = (_jax_dlpack(x, stream_value) for x in (q, k, v, out, lse))
    else:
        nq, nk, nv, nout = q, k, v, out

    _C.attention_forward(
        nq, nk, nv, nout, nlse,
        softmax_scale=scale_value,
        causal=bool(causal),
        window_left=window_left,
        window_right=window_right,
        bshd=bshd,
        uint16_is_bf16=as_bf16,
        block_m=cfg[0],
        block_n=cfg[1],
        num_splits=cfg[2],
        stream=stream_value,
        # Called only if the call splits its keys across CTAs (src/sm90/split_calls.h
        # decides); without one such a call runs its chunks in one CTA.
        alloc_workspace=_workspace_allocator(lib, q, None if stream is None else stream_value),
    )
    if lib == "jax":
        out, lse = _jax_results(out, lse)
    if return_lse:
        return out, lse
    return out


from .serving import _workspace_allocator, attention_varlen, attention_with_kvcache  # noqa: E402 (uses the helpers above)

__all__ += ["attention_varlen", "attention_with_kvcache"]
