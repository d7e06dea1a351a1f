"""Argument checking and the error mapping:
invalid argument -> ValueError, unsupported dtype/device/array type -> TypeError."""

from __future__ import annotations

import numpy as np
import pytest

import flashcore
from flashcore import _C


def qkv(shape_q=(1, 2, 8, 64), shape_kv=None, dtype=np.float32):
    shape_kv = shape_q if shape_kv is None else shape_kv
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal(shape_q).astype(dtype),
        rng.standard_normal(shape_kv).astype(dtype),
        rng.standard_normal(shape_kv).astype(dtype),
    )


# ----------------------------------------------------- errors from the library
def test_mismatched_head_dim_is_value_error():
    q, _, _ = qkv((1, 2, 8, 64))
    _, k, v = qkv((1, 2, 8, 32))
    with pytest.raises(ValueError, match=r"\bk\b|head_dim|head dim"):
        flashcore.attention(q, k, v)


def test_gqa_heads_not_divisible_is_value_error():
    q, _, _ = qkv((1, 6, 8, 64))
    _, k, v = qkv((1, 4, 8, 64))
    with pytest.raises(ValueError, match=r"head"):
        flashcore.attention(q, k, v)


def test_k_v_seqlen_mismatch_is_value_error():
    q, k, _ = qkv()
    v = np.zeros((1, 2, 9, 64), dtype=np.float32)
    with pytest.raises(ValueError, match=r"\bv\b"):
        flashcore.attention(q, k, v)


def test_batch_mismatch_is_value_error():
    q, _, _ = qkv((2, 2, 8, 64))
    _, k, v = qkv((1, 2, 8, 64))
    with pytest.raises(ValueError):
        flashcore.attention(q, k, v)


def test_mixed_dtypes_rejected():
    q, k, v = qkv()
    with pytest.raises((ValueError, TypeError), match=r"dtype|\bk\b"):
        flashcore.attention(q, k.astype(np.float16), v)


def test_wrong_out_shape_is_value_error():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"out"):
        flashcore.attention(q, k, v, out=np.empty((1, 2, 8, 16), dtype=np.float32))


def test_unsupported_head_dim_is_type_error():
    # NotSupported from the library maps to TypeError.
    q, k, v = qkv((1, 2, 8, 40))
    with pytest.raises(TypeError, match=r"head_dim"):
        flashcore.attention(q, k, v)


def test_negative_strides_rejected():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"\bv\b.*stride"):
        flashcore.attention(q, k, v[:, :, ::-1])


def test_wrong_out_dtype_rejected():
    q, k, v = qkv()
    with pytest.raises((ValueError, TypeError), match=r"out"):
        flashcore.attention(q, k, v, out=np.empty(q.shape, dtype=np.float16))


def test_nothing_written_on_error():
    q, k, _ = qkv()
    v = np.zeros((1, 2, 9, 64), dtype=np.float32)
    out = np.full(q.shape, 3.0, dtype=np.float32)
    with pytest.raises(ValueError):
        flashcore.attention(q, k, v, out=out)
    assert np.all(out == 3.0)


# ---------------------------------------------------------- dtype errors
@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint16, np.int8, np.complex64])
def test_unsupported_dtype_is_type_error(dtype):
    q, k, v = qkv(dtype=dtype)
    with pytest.raises(TypeError, match=r"dtype"):
        flashcore.attention(q, k, v)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint16])
def test_native_unsupported_dtype_is_type_error(dtype):
    # The extension's own check, below the Python layer.
    q, k, v = qkv(dtype=dtype)
    out = np.empty_like(q)
    with pytest.raises(TypeError, match=r"\bq\b.*dtype"):
        _C.attention_forward(q, k, v, out, None)


def test_native_lse_must_be_float32():
    q, k, v = qkv()
    out = np.empty_like(q)
    lse = np.empty((1, 2, 8), dtype=np.float16)
    with pytest.raises((TypeError, ValueError), match=r"lse"):
        _C.attention_forward(q, k, v, out, lse)


def test_native_call_works():
    q, k, v = qkv()
    out = np.empty_like(q)
    lse = np.empty((1, 2, 8), dtype=np.float32)
    _C.attention_forward(q, k, v, out, lse, causal=True)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse))


# ---------------------------------------------------------- Python-side checks
@pytest.mark.parametrize("bad", [None, 3.0, "q", [[[[1.0]]]]])
def test_non_array_is_type_error(bad):
    _, k, v = qkv()
    with pytest.raises(TypeError, match=r"\bq\b.*expected an array"):
        flashcore.attention(bad, k, v)


def test_non_array_k_is_type_error():
    q, _, v = qkv()
    with pytest.raises(TypeError, match=r"\bk\b"):
        flashcore.attention(q, [1, 2, 3], v)


def test_unknown_dlpack_array_is_type_error():
    class Foreign:
        ndim = 4
        shape = (1, 2, 8, 64)

        def __dlpack__(self, stream=None):
            raise AssertionError("must not be called")

    _, k, v = qkv()
    with pytest.raises(TypeError, match=r"not supported"):
        flashcore.attention(Foreign(), k, v)


@pytest.mark.parametrize("shape", [(2, 8, 64), (1, 1, 2, 8, 64), (64,)])
def test_wrong_ndim_is_value_error(shape):
    _, k, v = qkv()
    with pytest.raises(ValueError, match=r"\bq\b.*4-d"):
        flashcore.attention(np.zeros(shape, dtype=np.float32), k, v)


def test_bad_layout():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"layout"):
        flashcore.attention(q, k, v, layout="bsdh")
    with pytest.raises(TypeError, match=r"layout"):
        flashcore.attention(q, k, v, layout=1)
    # case-insensitive
    flashcore.attention(q, k, v, layout="BHSD")


@pytest.mark.parametrize(
    "window,exc",
    [
        ((-2, 0), ValueError),
        ((0, -5), ValueError),
        ((1, 2, 3), ValueError),
        ((1,), ValueError),
        ("ab", TypeError),
        (5, TypeError),
        ((1.5, 0), TypeError),
        ((True, 0), TypeError),
    ],
)
def test_bad_window(window, exc):
    q, k, v = qkv()
    with pytest.raises(exc, match=r"window"):
        flashcore.attention(q, k, v, window=window)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -0.5])
def test_bad_scale(scale):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"scale"):
        flashcore.attention(q, k, v, scale=scale)


def test_bad_block_sizes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"block_m"):
        flashcore.attention(q, k, v, block_m=-64)
    with pytest.raises(TypeError, match=r"block_n"):
        flashcore.attention(q, k, v, block_n=64.0)


def test_readonly_out_rejected():
    q, k, v = qkv()
    out = np.empty_like(q)
    out.setflags(write=False)
    with pytest.raises((TypeError, ValueError)):
        flashcore.attention(q, k, v, out=out)
