"""float64 NumPy reference for the flashcore tests (full softmax, no tiling)."""

from __future__ import annotations

import numpy as np


def allowed_mask(seqlen_q, seqlen_k, causal=False, window=None):
    """Boolean (Sq, Sk) mask, bottom-right aligned: query row i sits at key
    position i + (Sk - Sq); causal means window_right = 0."""
    left, right = (-1, -1) if window is None else window
    left = -1 if left is None else left
    right = -1 if right is None else right
    if causal:
        right = 0
    rows = np.arange(seqlen_q)[:, None] + (seqlen_k - seqlen_q)
    cols = np.arange(seqlen_k)[None, :]
    mask = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if left >= 0:
        mask &= cols >= rows - left
    if right >= 0:
        mask &= cols <= rows + right
    return mask


def attention_ref(q, k, v, *, causal=False, scale=None, window=None):
    """q: (B, Hq, Sq, D), k/v: (B, Hkv, Sk, D), any float dtype.

    Returns (out float64 (B, Hq, Sq, D), lse float64 (B, Hq, Sq)). Rows with
    no allowed key give out = 0 and lse = -inf."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    mask = allowed_mask(q.shape[2], k.shape[2], causal, window)
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    denom = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.where(denom > 0, np.log(np.where(denom > 0, denom, 1.0)) + m_safe, -np.inf)
    p = np.divide(p, denom, out=np.zeros_like(p), where=denom > 0)
    out = np.einsum("bhqk,bhkd->bhqd", p, v)
    return out, lse[..., 0]


def attention_varlen_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, **kwargs):
    """Packed sequences, each on its own: q (total_q, Hq, D), k/v (total_k,
    Hkv, D), prefix sums of the lengths. Returns (out float64 (total_q, Hq,
    D), lse float64 (Hq, total_q)), the layouts attention_varlen returns;
    kwargs as for attention_ref."""
    q, k, v = (np.asarray(x) for x in (q, k, v))
    out = np.zeros(q.shape, dtype=np.float64)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        qs = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        ks = slice(int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1]))
        o, l = attention_ref(*(x.transpose(1, 0, 2)[None] for x in (q[qs], k[ks], v[ks])), **kwargs)
        out[qs] = o[0].transpose(1, 0, 2)
        lse[:, qs] = l[0]
    return out, lse
