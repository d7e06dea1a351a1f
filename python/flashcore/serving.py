"""Serving entry points: variable-length batches and KV caches.

* :func:`attention_varlen`: a batch of sequences of different lengths packed
  row after row ("THD": (total_tokens, heads, head_dim)), described by
  cumulative sequence lengths, as in FlashAttention's
  ``flash_attn_varlen_func``.
* :func:`attention_with_kvcache`: queries of one or more new tokens per
  sequence against a KV cache, contiguous or paged, optionally appending the
  new keys and values into the cache first, as in FlashAttention's
  ``flash_attn_with_kvcache``.

Both run on host arrays (the CPU reference backend) and on CUDA arrays, and
take the same array libraries as :func:`flashcore.attention`. The metadata
arrays (``cu_seqlens_*``, ``cache_seqlens``, ``block_table``) are int32 arrays
on the device of ``q``. Masks (causal, window) are bottom-right aligned per
sequence, using that sequence's own query and key lengths; a sequence with no
keys outputs zeros and LSE ``-inf``.

Metadata contents (monotonic prefix sums, cache lengths within capacity,
block-table entries inside the page pool) are always checked on the CPU.
On CUDA the check copies the metadata to the host and synchronizes the
stream; ``check=None`` does it except while the current PyTorch/CuPy stream
is capturing a CUDA graph (``check=True``/``False`` force it on or off). The
kernels clip every index, so unchecked bad metadata gives wrong numbers, never
an out-of-bounds access.
"""

from __future__ import annotations

import sys

import numpy as np

from . import (
    _C,
    _allocate,
    _array_library,
    _block,
    _check_array,
    _non_negative_int,
    _numpy_native,
    _parse_window,
    _scale,
    _stream,
    _type_name,
)

__all__ = ["attention_varlen", "attention_with_kvcache"]


# ----------------------------------------------------------------- helpers
def _check_packed(name: str, x, lib: str | None = None) -> str:
    """A (tokens, heads, head_dim) array; the same checks as flashcore.attention's
    4-d arrays otherwise (library, dtype)."""
    if _array_library(x) in (None, "dlpack"):
        return _check_array(name, x, lib)  # raises the usual TypeError
    if x.ndim != 3:
        raise ValueError(
            f"{name}: expected a 3-d (tokens, heads, head_dim) array, got shape {tuple(x.shape)}"
        )
    return _check_array(name, x[None], lib)


def _index_array(name: str, x, lib: str):
    """A metadata array. Lists are accepted for NumPy; dtype (int32), rank,
    device and contiguity are checked by the native layer."""
    if x is None:
        return None
    if lib == "numpy" and isinstance(x, (list, tuple)):
        return np.asarray(x, dtype=np.int32)
    if _array_library(x) in (None, "dlpack"):
        raise TypeError(f"{name}: expected an int32 array, got {_type_name(x)}")
    return x


_torch_allocators: dict = {}


def _torch_device_allocator(device_index: int):
    """_workspace_allocator for PyTorch tensors on CUDA device
    `device_index` and the current stream, made once per device: every CUDA
    call is passed one (a closure made per call measured 0.3-0.4 us of host
    time, bench/results/2026-11-26b-h100)."""
    alloc = _torch_allocators.get(device_index)
    if alloc is None:
        torch = sys.modules["torch"]
        device = torch.device("cuda", device_index)

        def alloc(nbytes: int):
            return torch.empty(nbytes, dtype=torch.uint8, device=device)

        _torch_allocators[device_index] = alloc
    return alloc


def _workspace_allocator(lib: str, like, stream: int | None = None):
    """A callable nbytes -> uint8 array on `like`'s device for the workspace
    of split-KV partials and tile lists (PyTorch's caching allocator makes it
    cheap and CUDA-graph safe), or None where no call needs one (the CPU
    backend).

    With an explicit `stream` the block is allocated on that stream: the
    caching allocators hand a freed block out again only to work ordered
    after it on its own stream, and the kernels read it on `stream`, after
    this call has dropped it."""
    if lib == "torch" and like.is_cuda:
        if stream is None:
            return _torch_device_allocator(like.get_device())
        torch = sys.modules["torch"]

        def alloc_torch(nbytes: int):
            with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=like.device)):
                return torch.empty(nbytes, dtype=torch.uint8, device=like.device)
        return alloc_torch
    if lib == "cupy":
        cupy = sys.modules["cupy"]

        def alloc(nbytes: int):
            with like.device:
                if stream is None:
                    return cupy.empty(nbytes, dtype=cupy.uint8)
                with cupy.cuda.ExternalStream(stream):
                    return cupy.empty(nbytes, dtype=cupy.uint8)
        return alloc
    return None


def _is_capturing(lib: str, q) -> bool:
    """True while the caller's current CUDA stream captures a graph."""
    if lib == "torch":
        return bool(q.is_cuda and sys.modules["torch"].cuda.is_current_stream_capturing())
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        with q.device:
            try:
                return bool(cupy.cuda.get_current_stream().is_capturing())
            except (AttributeError, RuntimeError):  # older CuPy: no capture API
                return False
    return False


def _on_host(lib: str, q) -> bool:
    return lib == "numpy" or (lib == "torch" and not q.is_cuda)


def _run(lib, q, k, v, out, lse, *, layout, k_new=None, v_new=None, metadata, causal, scale,
         window, check, stream, block_m=None, block_n=None, num_splits=None):
    window_left, window_right = _parse_window(window)
    if check is None:
        check_metadata = not _is_capturing(lib, q)
    else:
        check_metadata = bool(check)
    if _on_host(lib, q):
        check_metadata = False  # the CPU backend always checks the metadata itself
    stream_value = _stream(lib, q, stream)

    arrays = [q, k, v, out, k_new, v_new]
    as_bf16 = False
    if lib == "numpy":
        for i, x in enumerate(arrays):
            if x is not None:
                arrays[i], bf16 = _numpy_native(x)
                as_bf16 = as_bf16 or bf16
    elif lib == "torch":
        # DLPack refuses tensors that require grad; this is a forward-only op.
        arrays = [None if x is None else x.detach() for x in arrays]
    nq, nk, nv, nout, nk_new, nv_new = arrays

    _C.attention_serving(
        nq, nk, nv, nout, lse,
        layout=layout,
        k_new=nk_new,
        v_new=nv_new,
        softmax_scale=_scale(scale),
        causal=bool(causal),
        window_left=window_left,
        window_right=window_right,
        uint16_is_bf16=as_bf16,
        block_m=_block("block_m", block_m),
        block_n=_block("block_n", block_n),
        num_splits=_block("num_splits", num_splits),
        stream=stream_value,
        check_metadata=check_metadata,
        alloc_workspace=_workspace_allocator(lib, q, None if stream is None else stream_value),
        **metadata,
    )


# ----------------------------------------------------------------- public API
def attention_varlen(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    scale: float | None = None,
    window=None,
    return_lse: bool = False,
    out=None,
    check: bool | None = None,
    stream: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_splits: int | None = None,
):
    """Attention over a batch of variable-length sequences packed row after row.

    Args:
      q: (total_q, Hq, D) array: the query rows of all sequences, packed.
      k, v: (total_k, Hkv, D) arrays; Hq % Hkv == 0 (GQA/MQA). Same dtype and
        device as q (float32 on the CPU only; float16/bfloat16 anywhere).
      cu_seqlens_q, cu_seqlens_k: int32 arrays of num_seqs + 1 prefix sums
        (starting at 0, ending at total_q / total_k) on q's device: sequence b
        owns q rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key rows
        [cu_seqlens_k[b], cu_seqlens_k[b+1]).
      max_seqlen_q, max_seqlen_k: upper bounds of the sequences' lengths.
      causal, scale, window: as in :func:`flashcore.attention`; masks are
        bottom-right aligned per sequence.
      return_lse: also return the log-sum-exp of each row, float32, shaped
        (Hq, total_q) (heads first, like FlashAttention's varlen LSE).
      out: optional (total_q, Hq, D) output array, written in place.
      check: check the metadata contents first (see the module docstring);
        None: yes, except during CUDA-graph capture.
      stream: cudaStream_t as an int; default: the current PyTorch/CuPy stream.
      block_m, block_n: tile overrides for the CUDA backend (None: dispatch
        chooses). num_splits: None lets each sequence split its keys into
        chunks sized by its own length (batch invariant); 1 turns split-KV
        off; n > 1 cuts the longest sequence into at most n chunks of a
        multiple of 128 keys (the chunk size then depends on the batch's
        longest sequence: not batch invariant).

    Returns:
      out, or (out, lse) when return_lse.

    Raises:
      TypeError: not an array, unsupported array library, dtype or device.
      ValueError: bad shapes, metadata or arguments (the message names which).
      RuntimeError: CUDA or internal error.
    """
    lib = _check_packed("q", q)
    _check_packed("k", k, lib)
    _check_packed("v", v, lib)
    if out is not None:
        _check_packed("out", out, lib)
    metadata = dict(
        cu_seqlens_q=_index_array("cu_seqlens_q", cu_seqlens_q, lib),
        cu_seqlens_k=_index_array("cu_seqlens_k", cu_seqlens_k, lib),
        max_seqlen_q=_non_negative_int("max_seqlen_q", max_seqlen_q),
        max_seqlen_k=_non_negative_int("max_seqlen_k", max_seqlen_k),
    )
    if metadata["cu_seqlens_q"] is None or metadata["cu_seqlens_k"] is None:
        raise TypeError("cu_seqlens_q and cu_seqlens_k: expected int32 arrays, got None")
    if out is None:
        out = _allocate(lib, q, tuple(q.shape[:2]) + (v.shape[2],), dtype_like=True)
    lse = _allocate(lib, q, (q.shape[1], q.shape[0]), dtype_like=False) if return_lse else None
    _run(lib, q, k, v, out, lse, layout="thd", metadata=metadata, causal=causal, scale=scale,
         window=window, check=check, stream=stream, block_m=block_m, block_n=block_n,
         num_splits=num_splits)
    return (out, lse) if return_lse else out


def attention_with_kvcache(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    *,
    k_new=None,
    v_new=None,
    block_table=None,
    causal: bool = False,
    scale: float | None = None,
    window=None,
    return_lse: bool = False,
    out=None,
    layout: str = "bshd",
    check: bool | None = None,
    stream: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_splits: int | None = None,
):
    """Attention of new query tokens against a KV cache (decode, or prefill
    over a cached prefix), with an optional append of new keys and values.

    Shapes below are for layout "bshd" (the default, FlashAttention's); with
    "bhsd" the heads axis comes before the sequence axis everywhere.

    Args:
      q: (B, Sq, Hq, D) queries.
      k_cache, v_cache: the cache, modified in place when k_new is given.
        Contiguous: (B, capacity, Hkv, D). Paged (block_table given): a pool
        of pages (num_pages, page_size, Hkv, D), page_size a multiple of 16.
      cache_seqlens: (B,) int32: tokens already in each sequence's cache.
      k_new, v_new: optional (B, S_new, Hkv, D): written into the cache at
        positions [cache_seqlens[b], cache_seqlens[b] + S_new) before
        attention runs. cache_seqlens is NOT updated (the caller advances it).
      block_table: optional (B, max_pages_per_seq) int32: key j of sequence b
        is row j % page_size of page block_table[b, j // page_size].
      causal, scale, window: as in :func:`flashcore.attention`; masks are
        bottom-right aligned per sequence against its cache_seqlens[b] + S_new
        keys (so causal decode lets each new token see the whole prefix).
      return_lse: also return the log-sum-exp, float32, shaped (B, Hq, Sq).
      out: optional output array shaped like q, written in place.
      layout: "bshd" or "bhsd".
      check: check the metadata contents first (see the module docstring);
        None: yes, except during CUDA-graph capture.
      stream: cudaStream_t as an int; default: the current PyTorch/CuPy stream.
      block_m, block_n, num_splits: as in :func:`attention_varlen`.

    Returns:
      out, or (out, lse) when return_lse.

    Raises:
      TypeError: not an array, unsupported array library, dtype or device.
      ValueError: bad shapes, metadata or arguments (the message names which;
        the library calls the cache k and v).
      RuntimeError: CUDA or internal error.
    """
    if not isinstance(layout, str) or layout.lower() not in ("bshd", "bhsd"):
        raise ValueError(f"layout: expected 'bshd' or 'bhsd', got {layout!r}")
    layout = layout.lower()
    lib = _check_array("q", q)
    _check_array("k_cache", k_cache, lib)
    _check_array("v_cache", v_cache, lib)
    if (k_new is None) != (v_new is None):
        raise ValueError("k_new and v_new: give both or neither")
    if k_new is not None:
        _check_array("k_new", k_new, lib)
        _check_array("v_new", v_new, lib)
    if out is not None:
        _check_array("out", out, lib)
    metadata = dict(
        cache_seqlens=_index_array("cache_seqlens", cache_seqlens, lib),
        block_table=_index_array("block_table", block_table, lib),
    )
    if metadata["cache_seqlens"] is None:
        raise TypeError("cache_seqlens: expected an int32 array, got None")
    if layout == "bshd":
        batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    else:
        batch, heads_q, seqlen_q = q.shape[0], q.shape[1], q.shape[2]
    if out is None:
        out = _allocate(lib, q, tuple(q.shape[:3]) + (v_cache.shape[3],), dtype_like=True)
    lse = _allocate(lib, q, (batch, heads_q, seqlen_q), dtype_like=False) if return_lse else None
    _run(lib, q, k_cache, v_cache, out, lse, layout=layout, k_new=k_new, v_new=v_new,
         metadata=metadata, causal=causal, scale=scale, window=window, check=check, stream=stream,
         block_m=block_m, block_n=block_n, num_splits=num_splits)
    return (out, lse) if return_lse else out
