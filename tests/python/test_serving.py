"""flashcore.attention_varlen and flashcore.attention_with_kvcache: NumPy on the
CPU reference backend against the float64 reference, argument and metadata
errors, and (with PyTorch and a GPU) the CUDA backend against the CPU one."""

from __future__ import annotations

import numpy as np
import pytest

import flashcore
from flashcore import _C
from reference import attention_ref, attention_varlen_ref

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}
LSE_TOL = {"float32": 2e-5, "float16": 1e-4, "bfloat16": 1e-4}


def _i32(values):
    return np.asarray(values, dtype=np.int32)


def _cu(lens):
    return _i32(np.concatenate([[0], np.cumsum(lens)]))


def _close(got, ref, dtype, what):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    if not ref.size:
        return
    err = float(np.max(np.abs(got - ref)))
    assert err <= TOL[dtype] * max(1.0, float(np.max(np.abs(ref)))), f"{what}: max abs error {err:.3e}"


def _close_lse(got, ref, dtype, what):
    assert np.array_equal(np.isneginf(got), np.isneginf(ref)), f"{what}: -inf rows differ"
    fin = np.isfinite(ref)
    if fin.any():
        err = float(np.max(np.abs(got[fin].astype(np.float64) - ref[fin])))
        assert err <= LSE_TOL[dtype] * max(1.0, float(np.max(np.abs(ref[fin])))), f"{what}: {err:.3e}"


# ------------------------------------------------------------------ varlen
LENS_Q = [5, 0, 130, 1, 33]
LENS_K = [40, 3, 0, 1, 200]


def _varlen_inputs(rng, dtype, hq=4, hkv=2, d=64, lens_q=LENS_Q, lens_k=LENS_K):
    dt = DTYPES[dtype]
    q = rng.standard_normal((sum(lens_q), hq, d)).astype(dt)
    k = rng.standard_normal((sum(lens_k), hkv, d)).astype(dt)
    v = rng.standard_normal((sum(lens_k), hkv, d)).astype(dt)
    return q, k, v, _cu(lens_q), _cu(lens_k)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window=(17, 5)), dict(causal=True, window=(30, 0))])
@pytest.mark.parametrize("heads", [(4, 2), (3, 3), (6, 1)])
def test_varlen_matches_reference(rng, dtype, mask, heads):
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, dtype, hq=heads[0], hkv=heads[1])
    out, lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max(LENS_Q), max(LENS_K),
                                          return_lse=True, **mask)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (heads[0], q.shape[0]) and lse.dtype == np.float32
    ref, ref_lse = attention_varlen_ref(q, k, v, cu_q, cu_k, **mask)
    for b in range(len(LENS_Q)):
        qs = slice(cu_q[b], cu_q[b + 1])
        _close(out[qs], ref[qs], dtype, f"out of sequence {b}")
        _close_lse(lse[:, qs], ref_lse[:, qs], dtype, f"lse of sequence {b}")


def test_varlen_zero_key_sequence_gives_zeros_and_minus_inf(rng):
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, "float32", lens_q=[4, 2], lens_k=[0, 3])
    out, lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, 4, 3, return_lse=True)
    assert np.all(out[:4] == 0) and np.all(np.isneginf(lse[:, :4]))
    assert np.all(np.isfinite(lse[:, 4:]))


def test_varlen_out_argument_and_lists(rng):
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, "float16")
    out = np.empty_like(q)
    got = flashcore.attention_varlen(q, k, v, list(cu_q), list(cu_k), 130, 200, causal=True, out=out)
    assert got is out
    again = flashcore.attention_varlen(q, k, v, cu_q, cu_k, 130, 200, causal=True)
    assert np.array_equal(out, again)


def test_varlen_matches_plain_attention_bitwise(rng):
    # One sequence alone through flashcore.attention gives the same bits.
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, "bfloat16")
    out = flashcore.attention_varlen(q, k, v, cu_q, cu_k, 130, 200, causal=True)
    b = 4
    qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
    alone = flashcore.attention(q[None, qs], k[None, ks], v[None, ks], causal=True, layout="bshd")
    assert np.array_equal(alone[0].view(np.uint16), out[qs].view(np.uint16))


# ------------------------------------------------------------------ KV cache
def _cache_inputs(rng, dtype, *, b=3, hq=4, hkv=2, d=64, sq=2, capacity=256, lens=(0, 17, 200),
                  s_new=0, page_size=0):
    """bshd cache inputs; with page_size, the same cache scattered into a
    pool of shuffled pages (plus two unused ones) and the block table."""
    dt = DTYPES[dtype]
    q = rng.standard_normal((b, sq, hq, d)).astype(dt)
    k = rng.standard_normal((b, capacity, hkv, d)).astype(dt)
    v = rng.standard_normal((b, capacity, hkv, d)).astype(dt)
    k_new = rng.standard_normal((b, s_new, hkv, d)).astype(dt) if s_new else None
    v_new = rng.standard_normal((b, s_new, hkv, d)).astype(dt) if s_new else None
    out = dict(q=q, k=k, v=v, k_new=k_new, v_new=v_new, cache_seqlens=_i32(lens), block_table=None)
    if page_size:
        pages = capacity // page_size
        perm = rng.permutation(b * pages + 2).astype(np.int32)
        table = perm[: b * pages].reshape(b, pages)
        pool_k = np.full((b * pages + 2, page_size, hkv, d), np.nan, dtype=dt)
        pool_v = pool_k.copy()
        for i in range(b):
            for p in range(pages):
                pool_k[table[i, p]] = k[i, p * page_size:(p + 1) * page_size]
                pool_v[table[i, p]] = v[i, p * page_size:(p + 1) * page_size]
        out.update(k=pool_k, v=pool_v, block_table=table, contiguous_k=k, contiguous_v=v)
    return out


def _gather(pool, table, i, n):
    """The first n keys of sequence i of a paged (pages, page_size, H, D) pool."""
    page_size = pool.shape[1]
    rows = [pool[table[i, j // page_size], j % page_size] for j in range(n)]
    return np.stack(rows) if rows else pool[0, :0]


def _kvcache(inp, **kw):
    return flashcore.attention_with_kvcache(
        inp["q"], inp["k"], inp["v"], inp["cache_seqlens"], k_new=inp["k_new"], v_new=inp["v_new"],
        block_table=inp["block_table"], **kw)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("page_size", [0, 16, 64, 256])
@pytest.mark.parametrize("s_new", [0, 2])
def test_kvcache_matches_reference(rng, dtype, page_size, s_new):
    inp = _cache_inputs(rng, dtype, s_new=s_new, page_size=page_size)
    out, lse = _kvcache(inp, causal=True, return_lse=True)
    assert out.shape == inp["q"].shape and lse.shape == (3, 4, 2)
    for i, n in enumerate(inp["cache_seqlens"]):
        keys = n + s_new
        if page_size:
            ks, vs = (_gather(inp[x], inp["block_table"], i, keys) for x in ("k", "v"))
        else:
            ks, vs = inp["k"][i, :keys], inp["v"][i, :keys]
        if s_new:  # the append happened, in place
            assert np.array_equal(ks[n:], inp["k_new"][i]) and np.array_equal(vs[n:], inp["v_new"][i])
        ref, ref_lse = attention_ref(inp["q"][i:i + 1].transpose(0, 2, 1, 3), ks[None].transpose(0, 2, 1, 3),
                                     vs[None].transpose(0, 2, 1, 3), causal=True)
        _close(out[i:i + 1].transpose(0, 2, 1, 3), ref, dtype, f"out of sequence {i}")
        _close_lse(lse[i:i + 1], ref_lse, dtype, f"lse of sequence {i}")


@pytest.mark.parametrize("page_size", [16, 32, 64, 128, 256])
def test_paged_equals_contiguous_bitwise(page_size):
    inputs = []
    for paged in (False, True):
        inp = _cache_inputs(np.random.default_rng(7), "float16", s_new=3, sq=3,
                            page_size=page_size if paged else 0)
        inputs.append((inp, _kvcache(inp, causal=True, window=(40, 0))))
    (contiguous, out_c), (paged, out_p) = inputs
    assert np.array_equal(out_c, out_p)
    for i, n in enumerate(contiguous["cache_seqlens"]):
        assert np.array_equal(_gather(paged["k"], paged["block_table"], i, n + 3), contiguous["k"][i, :n + 3])


def test_append_leaves_other_rows_untouched(rng):
    inp = _cache_inputs(rng, "bfloat16", s_new=2, sq=2)
    before_k, before_v = inp["k"].copy(), inp["v"].copy()
    _kvcache(inp, causal=True)
    for i, n in enumerate(inp["cache_seqlens"]):
        before_k[i, n:n + 2] = inp["k_new"][i]
        before_v[i, n:n + 2] = inp["v_new"][i]
    assert np.array_equal(inp["k"].view(np.uint16), before_k.view(np.uint16))
    assert np.array_equal(inp["v"].view(np.uint16), before_v.view(np.uint16))


def test_kvcache_bhsd_layout(rng):
    inp = _cache_inputs(rng, "float32", s_new=1, sq=1)
    bhsd = {x: (None if inp[x] is None else np.ascontiguousarray(inp[x].transpose(0, 2, 1, 3)))
            for x in ("q", "k", "v", "k_new", "v_new")}
    out_bshd = _kvcache(inp)
    out_bhsd = flashcore.attention_with_kvcache(bhsd["q"], bhsd["k"], bhsd["v"], inp["cache_seqlens"],
                                                k_new=bhsd["k_new"], v_new=bhsd["v_new"], layout="bhsd")
    assert np.array_equal(out_bshd.transpose(0, 2, 1, 3), out_bhsd)


# ------------------------------------------------------------------ errors
def test_non_monotonic_cu_seqlens_is_value_error(rng):
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, "float32", lens_q=[3, 4], lens_k=[5, 6])
    with pytest.raises(ValueError, match=r"cu_seqlens_q must be non-decreasing"):
        flashcore.attention_varlen(q, k, v, _i32([0, 5, 4]), cu_k, 7, 6)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[num_seqs\].*total_k"):
        flashcore.attention_varlen(q, k, v, cu_q, _i32([0, 5, 10]), 4, 6)
    with pytest.raises(ValueError, match=r"more than max_seqlen_q = 3"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, 3, 6)


def test_varlen_argument_errors(rng):
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, "float32", lens_q=[3, 4], lens_k=[5, 6])
    with pytest.raises(TypeError, match=r"cu_seqlens_q: expected an int32 array, got int64"):
        flashcore.attention_varlen(q, k, v, cu_q.astype(np.int64), cu_k, 4, 6)
    with pytest.raises(ValueError, match=r"cu_seqlens_k: has 4 entries but cu_seqlens_q has 3"):
        flashcore.attention_varlen(q, k, v, cu_q, _i32([0, 5, 11, 11]), 4, 6)
    with pytest.raises(ValueError, match=r"q: expected a 3-d \(tokens, heads, head_dim\) array"):
        flashcore.attention_varlen(q[None], k, v, cu_q, cu_k, 4, 6)
    with pytest.raises(ValueError, match=r"multiple of k heads"):
        flashcore.attention_varlen(q, k[:, :1].repeat(3, axis=1), v[:, :1].repeat(3, axis=1), cu_q, cu_k, 4, 6)
    with pytest.raises(ValueError, match=r"max_seqlen_k: must be >= 0"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, 4, -1)
    with pytest.raises(TypeError, match=r"k: expected an array"):
        flashcore.attention_varlen(q, k.tolist(), v, cu_q, cu_k, 4, 6)


def test_kvcache_metadata_errors(rng):
    inp = _cache_inputs(rng, "float16", s_new=2, page_size=16, capacity=64, lens=(5, 30, 10))
    k_before = inp["k"].copy()
    table = inp["block_table"].copy()
    table[1, 1] = inp["k"].shape[0]  # one past the pool; sequence 1 uses 2 pages
    with pytest.raises(ValueError, match=r"block_table\[1\]\[1\] = 14 .* outside the page pool \[0, 14\)"):
        _kvcache(dict(inp, block_table=table))
    with pytest.raises(ValueError, match=r"cache_seqlens\[2\] = 63 \+ 2 new tokens .* exceeds the cache capacity 64"):
        _kvcache(dict(inp, cache_seqlens=_i32([5, 30, 63])))
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] = -1 must be >= 0"):
        _kvcache(dict(inp, cache_seqlens=_i32([-1, 30, 10])))
    assert np.array_equal(inp["k"], k_before, equal_nan=True)  # nothing appended on error


def test_kvcache_argument_errors(rng):
    inp = _cache_inputs(rng, "float16", s_new=1, page_size=16, capacity=64, lens=(5, 30, 10))
    with pytest.raises(ValueError, match=r"k_new and v_new: give both or neither"):
        _kvcache(dict(inp, v_new=None))
    with pytest.raises(ValueError, match=r"k_new.shape\[1\] \(heads\) = 1 must equal k.shape\[1\] = 2"):
        _kvcache(dict(inp, k_new=inp["k_new"][:, :, :1], v_new=inp["v_new"][:, :, :1]))
    with pytest.raises(ValueError, match=r"cache_seqlens: has 2 entries but the batch is 3"):
        _kvcache(dict(inp, cache_seqlens=_i32([1, 2])))
    with pytest.raises(ValueError, match=r"block_table: has 2 rows"):
        _kvcache(dict(inp, block_table=inp["block_table"][:2]))
    with pytest.raises(ValueError, match=r"page_size\) = 8 must be a positive multiple of 16"):
        _kvcache(dict(inp, k=inp["k"][:, :8], v=inp["v"][:, :8]))
    with pytest.raises(TypeError, match=r"block_table: expected an int32 array, got float32"):
        _kvcache(dict(inp, block_table=inp["block_table"].astype(np.float32)))
    with pytest.raises(ValueError, match=r"layout"):
        _kvcache(inp, layout="thd")


def test_kernel_overrides_are_checked_and_ignored_on_the_cpu(rng):
    # block_m / block_n / num_splits pick CUDA kernel configurations; the CPU
    # reference has one algorithm, so the bits must not move.
    inp = _cache_inputs(rng, "float32", page_size=16)
    base = _kvcache(inp, causal=True)
    assert np.array_equal(base, _kvcache(inp, causal=True, num_splits=3, block_m=64, block_n=128))
    q, k, v, cu_q, cu_k = _varlen_inputs(rng, "float32")
    args = (q, k, v, cu_q, cu_k, int(np.diff(cu_q).max()), int(np.diff(cu_k).max()))
    assert np.array_equal(flashcore.attention_varlen(*args), flashcore.attention_varlen(*args, num_splits=1))
    for kw in ({"num_splits": -1}, {"block_m": -64}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            _kvcache(inp, **kw)
    with pytest.raises(TypeError, match="num_splits"):
        flashcore.attention_varlen(*args, num_splits=2.5)
    with pytest.raises(ValueError, match="num_splits"):
        _kvcache(inp, num_splits=2**31)


def test_varlen_with_cache_is_not_supported_yet(rng):
    q, k, v, cu_q, _ = _varlen_inputs(rng, "float16", lens_q=[1, 1], lens_k=[4, 4])
    with pytest.raises(TypeError, match=r"cu_seqlens_q together with cache_seqlens"):
        _C.attention_serving(q, k, v, np.empty_like(q), None, layout="thd", cu_seqlens_q=cu_q,
                             max_seqlen_q=1, cache_seqlens=_i32([1]))


# ------------------------------------------------------------------ CUDA
def _torch_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    if not flashcore.built_with_cuda():
        pytest.skip("flashcore was built without the CUDA backend")
    return torch


GPU_TOL = {"bfloat16": 1e-2, "float16": 2e-3}


def _rel_frobenius(got, ref):
    got, ref = got.double().cpu(), ref.double().cpu()
    return float((got - ref).norm() / max(float(ref.norm()), 1e-30))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(causal=True, window=(64, 0))])
@pytest.mark.parametrize("d", [128, 256])
def test_cuda_varlen_matches_cpu(dtype, mask, d):
    torch = _torch_cuda()
    tdt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    # The first sequence (one query row, 1100 keys) splits its keys: 256-key
    # chunks at head dim 128, 512-key ones at 256 (src/sm90/split_policy.h).
    lens_q, lens_k = [1, 0, 300, 77, 128], [1100, 3, 0, 77, 1000]
    hq, hkv = 8, 2
    q = torch.randn(sum(lens_q), hq, d, generator=g).to(tdt)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(tdt)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(tdt)
    cu_q, cu_k = (torch.from_numpy(_cu(x)) for x in (lens_q, lens_k))
    args = (max(lens_q), max(lens_k))
    ref, ref_lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, *args, return_lse=True, **mask)
    out, lse = flashcore.attention_varlen(q.cuda(), k.cuda(), v.cuda(), cu_q.cuda(), cu_k.cuda(), *args,
                                          return_lse=True, **mask)
    torch.cuda.synchronize()
    assert out.is_cuda and out.dtype == tdt and lse.shape == (hq, sum(lens_q))
    assert _rel_frobenius(out, ref) <= GPU_TOL[dtype]
    assert torch.equal(torch.isneginf(lse.cpu()), torch.isneginf(ref_lse))
    fin = torch.isfinite(ref_lse)
    assert float((lse.cpu()[fin] - ref_lse[fin]).abs().max()) <= 1e-3


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("page_size", [0, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("sq,s_new", [(1, 1), (1, 0), (4, 4), (130, 0)])
def test_cuda_kvcache_matches_cpu(dtype, page_size, sq, s_new):
    torch = _torch_cuda()
    tdt = getattr(torch, dtype)
    inp = _cache_inputs(np.random.default_rng(3), "float32", b=4, hq=8, hkv=1, d=128, sq=sq, capacity=1024,
                        lens=(0, 1, 700, 1024 - max(s_new, 1) - 1), s_new=s_new, page_size=page_size)
    cpu = {x: (None if inp[x] is None else torch.from_numpy(np.nan_to_num(inp[x])).to(
        torch.int32 if inp[x].dtype == np.int32 else tdt)) for x in
        ("q", "k", "v", "k_new", "v_new", "cache_seqlens", "block_table")}
    gpu = {x: (None if t is None else t.cuda()) for x, t in cpu.items()}
    ref, ref_lse = _kvcache(cpu, causal=True, return_lse=True)
    out, lse = _kvcache(gpu, causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert _rel_frobenius(out, ref) <= GPU_TOL[dtype]
    fin = torch.isfinite(ref_lse)
    assert float((lse.cpu()[fin] - ref_lse[fin]).abs().max()) <= 1e-3
    # The append writes the same bits on both backends.
    assert torch.equal(gpu["k"].cpu(), cpu["k"]) and torch.equal(gpu["v"].cpu(), cpu["v"])


@pytest.mark.parametrize("page_size", [0, 16, 64])
@pytest.mark.parametrize("sq,s_new", [(1, 1), (4, 0)])
def test_cuda_kvcache_head_dim_256_matches_cpu(page_size, sq, s_new):
    """Head dim 256 (Gemma's): decode over 2:1 GQA that splits its keys across
    CTAs (2500 keys), and a 4-token chunk, against the CPU backend."""
    torch = _torch_cuda()
    inp = _cache_inputs(np.random.default_rng(6), "float32", b=3, hq=8, hkv=4, d=256, sq=sq, capacity=2560,
                        lens=(1, 300, 2560 - max(s_new, 1) - 60), s_new=s_new, page_size=page_size)
    cpu = {x: (None if inp[x] is None else torch.from_numpy(np.nan_to_num(inp[x])).to(
        torch.int32 if inp[x].dtype == np.int32 else torch.bfloat16)) for x in
        ("q", "k", "v", "k_new", "v_new", "cache_seqlens", "block_table")}
    gpu = {x: (None if t is None else t.cuda()) for x, t in cpu.items()}
    ref, ref_lse = _kvcache(cpu, causal=True, return_lse=True)
    out, lse = _kvcache(gpu, causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert _rel_frobenius(out, ref) <= GPU_TOL["bfloat16"]
    fin = torch.isfinite(ref_lse)
    assert float((lse.cpu()[fin] - ref_lse[fin]).abs().max()) <= 1e-3
    assert torch.equal(gpu["k"].cpu(), cpu["k"]) and torch.equal(gpu["v"].cpu(), cpu["v"])


def test_cuda_bad_metadata_is_value_error():
    torch = _torch_cuda()
    inp = _cache_inputs(np.random.default_rng(4), "float32", s_new=1, page_size=16, capacity=64,
                        lens=(5, 30, 10))
    gpu = {x: (None if inp[x] is None else torch.from_numpy(np.nan_to_num(inp[x])).to(
        torch.int32 if inp[x].dtype == np.int32 else torch.float16).cuda()) for x in
        ("q", "k", "v", "k_new", "v_new", "cache_seqlens", "block_table")}
    gpu["block_table"][1, 0] = -3
    with pytest.raises(ValueError, match=r"block_table\[1\]\[0\] = -3"):
        _kvcache(gpu)
    _kvcache(gpu, check=False)  # unchecked: no error, and the kernels clip (nothing out of bounds)
    torch.cuda.synchronize()


def test_cuda_kvcache_in_graph_capture():
    torch = _torch_cuda()
    inp = _cache_inputs(np.random.default_rng(5), "float32", b=2, hq=4, hkv=2, sq=1, capacity=512,
                        lens=(100, 300), s_new=1, page_size=64)
    gpu = {x: (None if inp[x] is None else torch.from_numpy(np.nan_to_num(inp[x])).to(
        torch.int32 if inp[x].dtype == np.int32 else torch.bfloat16).cuda()) for x in
        ("q", "k", "v", "k_new", "v_new", "cache_seqlens", "block_table")}
    eager = _kvcache(gpu, causal=True)
    out = torch.empty_like(eager)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _kvcache(gpu, causal=True, out=out)  # warm-up (allocations) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _kvcache(gpu, causal=True, out=out)  # check=None: no host sync while capturing
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
