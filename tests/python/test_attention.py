"""flashcore.attention on NumPy arrays (CPU reference backend) against a
float64 NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import flashcore
from reference import attention_ref

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}
# Output tolerances against float64 math on the same (already rounded) inputs:
# dominated by rounding the result to the output dtype.
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}
LSE_TOL = {"float32": 2e-5, "float16": 1e-4, "bfloat16": 1e-4}


def make_qkv(rng, dtype, b=2, hq=4, hkv=None, sq=33, sk=None, d=64):
    hkv = hq if hkv is None else hkv
    sk = sq if sk is None else sk
    dt = DTYPES[dtype]
    q = rng.standard_normal((b, hq, sq, d)).astype(dt)
    k = rng.standard_normal((b, hkv, sk, d)).astype(dt)
    v = rng.standard_normal((b, hkv, sk, d)).astype(dt)
    return q, k, v


def check(out, ref, dtype, what="out"):
    got = np.asarray(out).astype(np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    err = np.max(np.abs(got - ref)) if got.size else 0.0
    tol = TOL[dtype] * max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    assert err <= tol, f"{what}: max abs error {err:.3e} > {tol:.3e}"


def check_lse(lse, ref_lse, dtype):
    assert lse.dtype == np.float32
    assert lse.shape == ref_lse.shape
    inf_ref = np.isneginf(ref_lse)
    assert np.array_equal(np.isneginf(lse), inf_ref), "LSE -inf rows differ"
    fin = ~inf_ref
    if fin.any():
        err = np.max(np.abs(lse[fin].astype(np.float64) - ref_lse[fin]))
        assert err <= LSE_TOL[dtype] * max(1.0, float(np.max(np.abs(ref_lse[fin])))), err


# ------------------------------------------------------------------ basics
def test_version_and_flags():
    assert isinstance(flashcore.__version__, str)
    assert flashcore.__version__.count(".") == 2
    assert flashcore.version() == flashcore.__version__
    assert isinstance(flashcore.built_with_cuda(), bool)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
def test_dtypes_causal(rng, dtype, causal):
    q, k, v = make_qkv(rng, dtype)
    out = flashcore.attention(q, k, v, causal=causal)
    assert out.dtype == q.dtype
    assert out.shape == q.shape
    ref, _ = attention_ref(q, k, v, causal=causal)
    check(out, ref, dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("seqlen", [1, 17, 129])
def test_odd_lengths(rng, dtype, seqlen):
    q, k, v = make_qkv(rng, dtype, b=1, hq=2, sq=seqlen, d=64)
    for causal in (False, True):
        out = flashcore.attention(q, k, v, causal=causal)
        ref, _ = attention_ref(q, k, v, causal=causal)
        check(out, ref, dtype)


@pytest.mark.parametrize("sq,sk", [(17, 129), (129, 17), (1, 64), (64, 1), (40, 70)])
@pytest.mark.parametrize("causal", [False, True])
def test_seqlen_q_ne_k(rng, sq, sk, causal):
    # sq > sk under causal leaves rows with no key: zeros and LSE = -inf.
    q, k, v = make_qkv(rng, "float32", b=1, hq=2, sq=sq, sk=sk, d=64)
    out, lse = flashcore.attention(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, causal=causal)
    check(out, ref, "float32")
    check_lse(lse, ref_lse, "float32")


@pytest.mark.parametrize(
    "window",
    [(8, 0), (0, 0), (5, 3), (-1, 4), (3, None), (None, None), (16, -1), (0, 100)],
)
@pytest.mark.parametrize("sq,sk", [(37, 37), (20, 50), (50, 20)])
def test_window(rng, window, sq, sk):
    q, k, v = make_qkv(rng, "float32", b=1, hq=2, sq=sq, sk=sk, d=64)
    out, lse = flashcore.attention(q, k, v, window=window, return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, window=window)
    check(out, ref, "float32")
    check_lse(lse, ref_lse, "float32")


def test_causal_with_left_window(rng):
    q, k, v = make_qkv(rng, "float16", b=1, hq=2, sq=64, sk=80, d=64)
    out = flashcore.attention(q, k, v, causal=True, window=(10, 0))
    ref, _ = attention_ref(q, k, v, causal=True, window=(10, 0))
    check(out, ref, "float16")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(rng, dtype, causal):
    q, k, v = make_qkv(rng, dtype, b=2, hq=8, hkv=2, sq=45, sk=61, d=64)
    out = flashcore.attention(q, k, v, causal=causal)
    assert out.shape == (2, 8, 45, 64)
    ref, _ = attention_ref(q, k, v, causal=causal)
    check(out, ref, dtype)


def test_mqa(rng):
    q, k, v = make_qkv(rng, "float32", b=1, hq=6, hkv=1, sq=20, d=64)
    out = flashcore.attention(q, k, v)
    ref, _ = attention_ref(q, k, v)
    check(out, ref, "float32")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_bshd_layout(rng, dtype):
    # The same data in (B, S, H, D) order, GQA, seqlen_q != seqlen_k.
    q, k, v = make_qkv(rng, dtype, b=2, hq=8, hkv=2, sq=33, sk=47, d=64)
    qs, ks, vs = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    out, lse = flashcore.attention(qs, ks, vs, layout="bshd", causal=True, return_lse=True)
    assert out.shape == qs.shape  # (B, Sq, Hq, D)
    assert out.flags["C_CONTIGUOUS"]
    assert lse.shape == (2, 8, 33)  # always (B, H, Sq)
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    check(out.transpose(0, 2, 1, 3), ref, dtype)
    check_lse(lse, ref_lse, dtype)
    # And bitwise the same as the bhsd call on the same values.
    out_bhsd = flashcore.attention(q, k, v, causal=True)
    assert np.ascontiguousarray(out.transpose(0, 2, 1, 3)).tobytes() == out_bhsd.tobytes()


def test_strided_views(rng):
    # Non-contiguous inputs: slices of larger arrays (heads and dims stride).
    # (flashcore asks for a contiguous last dim and 16-byte aligned strides
    # and base, which the views below keep.)
    big = rng.standard_normal((2, 8, 40, 192)).astype(np.float32)
    q = big[:, ::2, :33, :64]
    k = big[:, 1::2, :, 64:128]
    v = big[:, ::2, :, 128:192]
    assert not q.flags["C_CONTIGUOUS"]
    out = flashcore.attention(q, k, v)
    ref, _ = attention_ref(q, k, v)
    check(out, ref, "float32")


def test_broadcast_readonly_inputs(rng):
    # np.broadcast_to gives read-only, zero-stride views.
    k = rng.standard_normal((1, 2, 16, 64)).astype(np.float32)
    v = rng.standard_normal((1, 2, 16, 64)).astype(np.float32)
    q = np.broadcast_to(rng.standard_normal((1, 1, 8, 64)).astype(np.float32), (1, 2, 8, 64))
    assert not q.flags["WRITEABLE"]
    k.setflags(write=False)
    out = flashcore.attention(q, k, v)
    ref, _ = attention_ref(q, k, v)
    check(out, ref, "float32")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_return_lse(rng, dtype):
    q, k, v = make_qkv(rng, dtype, b=1, hq=3, sq=29, sk=29, d=64)
    out, lse = flashcore.attention(q, k, v, return_lse=True, scale=0.3)
    assert isinstance(lse, np.ndarray)
    assert lse.shape == (1, 3, 29) and lse.dtype == np.float32
    ref, ref_lse = attention_ref(q, k, v, scale=0.3)
    check(out, ref, dtype)
    check_lse(lse, ref_lse, dtype)


def test_scale(rng):
    q, k, v = make_qkv(rng, "float32", b=1, hq=2, sq=16, d=64)
    for scale in (0.05, 1.0, 2.5):
        out = flashcore.attention(q, k, v, scale=scale)
        ref, _ = attention_ref(q, k, v, scale=scale)
        check(out, ref, "float32")
    # None means 1/sqrt(D)
    np.testing.assert_array_equal(
        flashcore.attention(q, k, v), flashcore.attention(q, k, v, scale=1 / np.sqrt(64))
    )


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_out_argument(rng, dtype):
    q, k, v = make_qkv(rng, dtype, b=1, hq=2, sq=24, d=64)
    out = np.full(q.shape, 7, dtype=q.dtype)
    res = flashcore.attention(q, k, v, out=out)
    assert res is out
    ref, _ = attention_ref(q, k, v)
    check(out, ref, dtype)


def test_out_strided(rng):
    q, k, v = make_qkv(rng, "float32", b=1, hq=2, sq=24, d=64)
    buf = np.zeros((1, 2, 24, 128), dtype=np.float32)
    out = buf[..., 32:96]
    flashcore.attention(q, k, v, out=out)
    ref, _ = attention_ref(q, k, v)
    check(out, ref, "float32")
    assert np.all(buf[..., :32] == 0) and np.all(buf[..., 96:] == 0)


@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_head_dims(rng, d):
    q, k, v = make_qkv(rng, "float16", b=1, hq=2, sq=19, sk=23, d=d)
    out = flashcore.attention(q, k, v, causal=True)
    ref, _ = attention_ref(q, k, v, causal=True)
    check(out, ref, "float16")


def test_large_logits_stable(rng):
    # Scores of magnitude ~1e3: a naive exp() would overflow.
    q, k, v = make_qkv(rng, "float32", b=1, hq=1, sq=16, d=64)
    out = flashcore.attention(q * 40, k * 40, v)
    ref, _ = attention_ref(q * 40, k * 40, v)
    check(out, ref, "float32")


def test_zero_sized(rng):
    q = np.zeros((0, 2, 8, 64), dtype=np.float32)
    k = np.zeros((0, 2, 8, 64), dtype=np.float32)
    out = flashcore.attention(q, k, k)
    assert out.shape == (0, 2, 8, 64)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_deterministic(rng, dtype):
    q, k, v = make_qkv(rng, dtype, b=2, hq=8, hkv=2, sq=77, sk=90, d=64)
    a, lse_a = flashcore.attention(q, k, v, causal=True, return_lse=True)
    b, lse_b = flashcore.attention(q, k, v, causal=True, return_lse=True)
    assert a.tobytes() == b.tobytes()
    assert lse_a.tobytes() == lse_b.tobytes()


def test_demo_runs(capsys):
    from flashcore import demo

    assert demo.main(["--seqlen", "32", "--heads", "2", "--repeats", "1"]) == 0
    assert "max abs err" in capsys.readouterr().out
