"""Hugging Face transformers integration: ``attn_implementation="flashcore"``.

    import flashcore.hf
    flashcore.hf.register()                     # once, before loading models: "fcore"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fcore")

The name is ``"fcore"``, not ``"flashcore"``: transformers treats every
``attn_implementation`` whose name contains "flash" as a FlashAttention
kernel (it tries to import one and switches to its unpadded varlen inputs).

:func:`register` adds :func:`attention_forward` to
``transformers.AttentionInterface`` and, for the masks, registers
transformers' own SDPA mask builder (``sdpa_mask``) under the same name, so
the model hands this function exactly what it would hand SDPA: ``None``
where SDPA would use ``is_causal``, else a 4-d boolean (or additive float)
mask.

flashcore computes only bottom-right aligned causal / sliding-window masks
(and unmasked attention); it has no arbitrary masks. A mask is therefore
checked, not trusted: each batch row must be "causal with padding", i.e. a
range of valid keys ``[start_b, end_b)`` (left padding, right padding,
unfilled slots of a static KV cache) intersected with the causal (and
sliding-window) pattern of queries that sit at key positions ``off + i``.
flashcore then runs once per batch row on strided slices of q, k, v and of
the output (no copies; one call for the whole batch when all rows agree).
The whole mask must match that pattern exactly; query rows whose own
position is padding output zeros (their keys are masked for every real
query, so nothing reads them). A mask of any other shape (packed sequences, chunked
attention, per-head masks, a bias) raises ``ValueError`` instead of being
computed wrongly. Reading the mask needs one host synchronization per
distinct mask tensor (shared by all layers of a forward pass); that part
runs outside ``torch.compile`` graphs (``torch.compiler.disable``), while the
maskless path is a plain custom-op call that compiles without graph breaks.

Not supported (raise): dropout > 0, ``softcap``, ``position_bias``,
attention sinks (``s_aux``); backward (the op raises ``NotImplementedError``).
"""

from __future__ import annotations

import weakref

import torch

from . import torch_ops

__all__ = ["register", "attention_forward", "NAME"]

NAME = "fcore"


def register(name: str = NAME) -> str:
    """Registers flashcore with transformers' ``AttentionInterface`` (and its
    mask builder with ``AttentionMaskInterface``) under ``name`` (default
    ``"fcore"``); returns the name to pass as ``attn_implementation``.
    Idempotent."""
    if not isinstance(name, str) or not name or "flash" in name.lower():
        raise ValueError(
            f"name: {name!r} cannot be used: transformers takes every attn_implementation "
            "containing 'flash' for a FlashAttention kernel; use e.g. the default 'fcore'"
        )
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "flashcore.hf.register() needs Hugging Face transformers with "
            f"AttentionInterface / AttentionMaskInterface (transformers >= 4.53): {e}"
        ) from e
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def attention_forward(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    softcap: float | None = None,
    position_bias: torch.Tensor | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
):
    """transformers attention function. query: (B, Hq, Sq, D); key, value:
    (B, Hkv, Sk, D) with Hq % Hkv == 0 (GQA runs natively, nothing is
    repeated). Returns ``(attn_output (B, Sq, Hq, D), None)``."""
    if dropout:
        raise ValueError(f"flashcore attention: dropout={dropout} is not supported (inference only)")
    for what, val in (("softcap", softcap), ("position_bias", position_bias), ("s_aux", s_aux)):
        if val is not None:
            raise ValueError(f"flashcore attention: {what} is not supported")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal)
    scale = 0.0 if scaling is None else float(scaling)
    window_left = -1
    if sliding_window is not None:
        if not causal:
            raise ValueError("flashcore attention: sliding_window without a causal mask is not supported")
        # transformers: key j is visible to query p iff j > p - sliding_window
        window_left = int(sliding_window) - 1

    # (B, S, H, D) views of the (B, H, S, D) inputs: no copies, and the output
    # comes out (B, Sq, Hq, D) as transformers wants it.
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    sq, sk = q.shape[1], k.shape[1]
    if attention_mask is None:
        if causal and sq > 1:
            # SDPA semantics of a skipped mask: is_causal=True, aligned to the
            # top-left. With sk > sq that is the prefill of an empty static
            # cache: keys [0, sq) are the real ones.
            if sk > sq:
                k, v = k[:, :sq], v[:, :sq]
            elif sk < sq:
                raise ValueError(
                    f"flashcore attention: a causal call without a mask needs seqlen_k >= seqlen_q, "
                    f"got {sk} < {sq}"
                )
        out, _ = torch_ops.attention(
            q, k, v, causal=causal and sq > 1, scale=scale,
            window_left=window_left if causal else -1, bshd=True,
        )
        return out, None
    return _masked_attention(q, k, v, attention_mask, causal, scale, window_left), None


# ------------------------------------------------------------------ masks
_MASK_ERROR = (
    "flashcore attention supports only causal (optionally sliding-window) masks with padding: "
    "every batch row must allow a contiguous range of keys [start, end) intersected with the "
    "causal pattern; this mask {why}. Use attn_implementation='sdpa' for arbitrary masks."
)

# The last mask analysed: all layers of one forward pass share one mask tensor.
_plan_cache: dict = {"ref": None, "key": None, "plan": None}


def _allowed(mask: torch.Tensor) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        raise ValueError(_MASK_ERROR.format(why=f"has dtype {mask.dtype} (expected bool or float)"))
    allowed = mask == 0
    # An additive mask: 0 where allowed, a very negative number (or -inf)
    # where masked. Anything else is a bias flashcore cannot add.
    if not bool(((mask == 0) | (mask <= -1e4)).all()):
        raise ValueError(_MASK_ERROR.format(why="holds additive values other than 0 and -inf/min"))
    return allowed


def _plan(mask: torch.Tensor, batch: int, sq: int, sk: int, causal: bool, window_left: int):
    """Per batch row (q0, q1, k0, k1): flashcore runs on query rows
    [q0, q1) against keys [k0, k1), bottom-right aligned; other query rows
    are zeros. Raises ValueError if the mask is not of that form."""
    if mask.dim() != 4 or mask.shape[-2:] != (sq, sk) or mask.shape[0] not in (1, batch):
        raise ValueError(_MASK_ERROR.format(
            why=f"has shape {tuple(mask.shape)} (expected ({batch} or 1, 1 or heads, {sq}, {sk}))"))
    allowed = _allowed(mask)
    if allowed.shape[1] != 1:
        if not bool((allowed == allowed[:, :1]).all()):
            raise ValueError(_MASK_ERROR.format(why="differs between heads"))
    allowed = allowed[:, 0]  # (Bm, Sq, Sk)
    dev = allowed.device
    j = torch.arange(sk, device=dev)
    i = torch.arange(sq, device=dev)
    # First / last allowed key of each query row (argmax returns the first
    # maximum); byte-sized temporaries only, the mask is Bm * Sq * Sk.
    row_any = allowed.any(-1)                                    # (Bm, Sq)
    as_u8 = allowed.to(torch.uint8)
    first = torch.where(row_any, as_u8.argmax(-1), sk)           # (Bm, Sq)
    last = torch.where(row_any, sk - 1 - as_u8.flip(-1).argmax(-1), -1)
    end = last.amax(-1) + 1                                      # (Bm,): 0 if empty
    start = torch.minimum(first.amin(-1), end)                   # (Bm,): = end if empty
    s3, e3 = start[:, None, None], end[:, None, None]
    if causal:
        # Query row i sits at key position off + i, the same for all batch
        # rows. Two independent estimates must agree: the largest allowed key
        # minus i (over rows that see anything), and the last valid key of
        # the batch minus the last query row. (A batch in which every row is
        # right-padded is rejected: use the usual pad-to-longest batches.)
        off = torch.where(row_any, last - i, -(sq + sk)).amax()
        off2 = end.amax() - sq
        pos = off + i                                            # (Sq,)
        # Left-padding query rows (pos < start) see nothing, right-padding
        # ones (pos >= end) see all valid keys: the formula covers both.
        expect = (j >= s3) & (j < e3) & (j <= pos[None, :, None])
        if window_left >= 0:
            expect &= j >= pos[None, :, None] - window_left
        ok = (expect == allowed).all() & (off == off2)
    else:
        off = torch.zeros((), dtype=torch.long, device=dev)
        ok = (((j >= s3) & (j < e3)) == allowed).all()
    stats = torch.cat([ok.long().reshape(1), off.long().reshape(1), start.long(), end.long()])
    stats = stats.tolist()  # the one host synchronization
    if not stats[0]:
        raise ValueError(_MASK_ERROR.format(why="does not have that pattern"))
    off = stats[1]
    bm = allowed.shape[0]
    starts, ends = stats[2:2 + bm], stats[2 + bm:2 + 2 * bm]
    plan = []
    for s, e in zip(starts, ends):
        if causal:
            q0, q1 = max(0, s - off), min(sq, e - off)
            if q1 <= q0:
                plan.append((0, 0, 0, 0))
            else:
                plan.append((q0, q1, s, off + q1))
        else:
            plan.append((0, sq, s, e) if e > s else (0, 0, 0, 0))
    if bm == 1:
        plan = plan * batch
    return plan


def _cached_plan(mask, batch, sq, sk, causal, window_left):
    key = (mask._version, mask.data_ptr(), tuple(mask.shape), batch, sq, sk, causal, window_left)
    ref = _plan_cache["ref"]
    if ref is not None and ref() is mask and _plan_cache["key"] == key:
        return _plan_cache["plan"]
    plan = _plan(mask, batch, sq, sk, causal, window_left)
    try:
        _plan_cache.update(ref=weakref.ref(mask), key=key, plan=plan)
    except TypeError:  # pragma: no cover - not weak-referenceable: just don't cache
        pass
    return plan


@torch.compiler.disable
def _masked_attention(q, k, v, mask, causal, scale, window_left):
    """q: (B, Sq, Hq, D), k, v: (B, Sk, Hkv, D) views; returns (B, Sq, Hq, Dv)."""
    batch, sq, hq = q.shape[0], q.shape[1], q.shape[2]
    sk = k.shape[1]
    plan = _cached_plan(mask, batch, sq, sk, causal, window_left)
    full_rows = all(p[0] == 0 and p[1] == sq for p in plan)
    alloc = torch.empty if full_rows else torch.zeros
    out = alloc((batch, sq, hq, v.shape[3]), dtype=q.dtype, device=q.device)
    kw = dict(causal=causal, scale=scale, window_left=window_left if causal else -1, bshd=True)
    if all(p == plan[0] for p in plan):
        q0, q1, k0, k1 = plan[0]
        if q1 > q0:
            torch_ops.attention_into(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], out[:, q0:q1], **kw)
        return out
    for b, (q0, q1, k0, k1) in enumerate(plan):
        if q1 > q0:
            torch_ops.attention_into(q[b:b + 1, q0:q1], k[b:b + 1, k0:k1], v[b:b + 1, k0:k1],
                                     out[b:b + 1, q0:q1], **kw)
    return out
