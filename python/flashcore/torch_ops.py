"""flashcore's PyTorch operators, registered with ``torch.library``.

Importing this module (``flashcore.attention`` does it on its first call with
a torch tensor) registers two custom operators:

``torch.ops.flashcore.attention(q, k, v, causal=False, scale=0.0,
window_left=-1, window_right=-1, bshd=False, return_lse=False, block_m=0,
block_n=0, num_splits=0) -> (out, lse)``
    Functional: allocates ``out`` (q's axis order, v's head_dim, contiguous)
    and ``lse`` (float32 ``(B, Hq, Sq)``; an empty ``(0,)`` tensor unless
    ``return_lse``). This is what ``flashcore.attention`` calls for torch
    tensors.

``torch.ops.flashcore.attention_out(q, k, v, out, lse, ...) -> ()``
    The same computation written into caller-provided ``out`` (and ``lse``),
    declared as mutating them. ``flashcore.attention(..., out=...)`` uses it
    when no gradient is being recorded.

Both have fake (meta) implementations, so ``torch.compile(fullgraph=True)``
traces them without graph breaks, and both run on PyTorch's current CUDA
stream of the inputs' device (inside ``torch.cuda.graph`` capture that is the
capture stream). Inputs may be any strided views that satisfy flashcore's
layout rule (last dimension contiguous, 16-byte aligned strides): they are
handed to the native library through DLPack, never copied.

There is no backward pass yet: the functional op registers an autograd
formula that raises ``NotImplementedError`` naming the op, so
``loss.backward()`` through flashcore fails loudly instead of silently
producing no gradient.
"""

import math
import operator
from typing import Optional

import torch
from torch import Tensor

from . import _C
# The workspace, asked for only by calls that split across CTAs or keep a
# tile list (src/sm90/tile_list_plan.h).
from .serving import _torch_device_allocator, _workspace_allocator

__all__ = ["attention", "attention_out", "attention_into"]

_OP = "flashcore::attention"
_OP_OUT = "flashcore::attention_out"


def _check_4d(name: str, x: Tensor) -> None:
    if x.dim() != 4:
        raise ValueError(
            f"{name}: expected a 4-d tensor (batch, heads, seqlen, head_dim) or "
            f"(batch, seqlen, heads, head_dim), got shape {tuple(x.shape)}"
        )


def _out_shape(q: Tensor, v: Tensor):
    return (q.shape[0], q.shape[1], q.shape[2], v.shape[3])


def _lse_shape(q: Tensor, bshd: bool):
    if bshd:
        return (q.shape[0], q.shape[2], q.shape[1])
    return (q.shape[0], q.shape[1], q.shape[2])


def _launch(q, k, v, out, lse, causal, scale, window_left, window_right, bshd,
            block_m, block_n, num_splits) -> None:
    """Calls the native library on PyTorch's current stream of q's device."""
    kwargs = dict(
        softmax_scale=float(scale),
        causal=bool(causal),
        window_left=int(window_left),
        window_right=int(window_right),
        bshd=bool(bshd),
        block_m=int(block_m),
        block_n=int(block_n),
        num_splits=int(num_splits),
    )
    # DLPack refuses tensors that require grad; the autograd layer above this
    # implementation already owns the graph, so plain views are enough here.
    args = [t.detach() for t in (q, k, v, out)]
    lse_arg = None if lse is None else lse.detach()
    device = q.device
    if q.is_cuda:
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device).cuda_stream
            _C.attention_forward(*args, lse_arg, stream=int(stream),
                                 alloc_workspace=_workspace_allocator("torch", q), **kwargs)
    else:
        _C.attention_forward(*args, lse_arg, stream=0, **kwargs)


# ---------------------------------------------------------------- functional op
@torch.library.custom_op(_OP, mutates_args=())
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    scale: float = 0.0,
    window_left: int = -1,
    window_right: int = -1,
    bshd: bool = False,
    return_lse: bool = False,
    block_m: int = 0,
    block_n: int = 0,
    num_splits: int = 0,
) -> tuple[Tensor, Tensor]:
    """flashcore attention as a PyTorch operator: returns ``(out, lse)``.

    ``scale`` 0 means ``1/sqrt(head_dim)``; ``window_*`` -1 means unbounded;
    ``bshd`` says that q, k, v (and out) are ``(B, S, H, D)``. ``lse`` is an
    empty tensor unless ``return_lse``."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_4d(name, x)
    out = torch.empty(_out_shape(q, v), dtype=q.dtype, device=q.device)
    lse = torch.empty(_lse_shape(q, bshd) if return_lse else (0,), dtype=torch.float32,
                      device=q.device)
    _launch(q, k, v, out, lse if return_lse else None, causal, scale, window_left,
            window_right, bshd, block_m, block_n, num_splits)
    return out, lse


@attention.register_fake
def _attention_fake(q, k, v, causal=False, scale=0.0, window_left=-1, window_right=-1,
                    bshd=False, return_lse=False, block_m=0, block_n=0, num_splits=0):
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_4d(name, x)
    out = q.new_empty(_out_shape(q, v))
    lse = q.new_empty(_lse_shape(q, bshd) if return_lse else (0,), dtype=torch.float32)
    return out, lse


def _setup_context(ctx, inputs, output):
    pass


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(
        f"{_OP} has no backward pass yet: flashcore is forward-only (inference). "
        "Run the forward under torch.no_grad()/torch.inference_mode(), or use "
        "torch.nn.functional.scaled_dot_product_attention where gradients are needed."
    )


torch.library.register_autograd(_OP, _backward, setup_context=_setup_context)


# ---------------------------------------------------------------- out= variant
@torch.library.custom_op(_OP_OUT, mutates_args=("out", "lse"))
def attention_out(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Optional[Tensor],
    causal: bool = False,
    scale: float = 0.0,
    window_left: int = -1,
    window_right: int = -1,
    bshd: bool = False,
    block_m: int = 0,
    block_n: int = 0,
    num_splits: int = 0,
) -> None:
    """flashcore attention written into ``out`` (and ``lse`` unless None).
    Forward only: it has no autograd formula (use :func:`attention_into`,
    which falls back to the functional op when gradients are recorded)."""
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        _check_4d(name, x)
    _launch(q, k, v, out, lse, causal, scale, window_left, window_right, bshd,
            block_m, block_n, num_splits)


@attention_out.register_fake
def _attention_out_fake(q, k, v, out, lse, causal=False, scale=0.0, window_left=-1,
                        window_right=-1, bshd=False, block_m=0, block_n=0, num_splits=0):
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        _check_4d(name, x)
    return None


# ---------------------------------------------------------------- helpers
def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors)


def attention_into(q, k, v, out, lse=None, **kw) -> None:
    """Writes attention into ``out`` (and ``lse``): with the mutating op when
    no gradient is recorded (no extra memory), else with the functional op
    and ``out.copy_(...)`` so that ``backward()`` reaches the op's error."""
    if _needs_grad(q, k, v):
        res, res_lse = attention(q, k, v, return_lse=lse is not None, **kw)
        out.copy_(res)
        if lse is not None:
            lse.copy_(res_lse)
        return
    attention_out(q, k, v, out, lse, **kw)


_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_Tensor = torch.Tensor
_STRIDED = torch.strided
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_cuda_device = getattr(torch._C, "_cuda_getDevice", None)
_fast_path = True  # tests switch it off to compare against the custom op path
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_empty_like = torch.empty_like
_isfinite = math.isfinite


def _plain_dtype_code(q, k, v, out):
    """The dtype code the native library takes when q, k, v (and out) are
    plain strided torch.Tensors of one supported dtype and the fast path may
    run (not while torch.compile traces); else None. Anything else takes the
    op path, which names the offending tensor."""
    if not _fast_path or _is_compiling():
        return None
    if type(q) is not _Tensor or type(k) is not _Tensor or type(v) is not _Tensor:
        return None
    dtype = q.dtype
    if (q.layout is not _STRIDED or k.layout is not _STRIDED or v.layout is not _STRIDED
            or k.dtype is not dtype or v.dtype is not dtype):
        return None
    if out is not None and (type(out) is not _Tensor or out.layout is not _STRIDED or out.dtype is not dtype):
        return None
    return _DTYPE_CODES.get(dtype)


def _eager(q, k, v, out, causal, scale, layout, return_lse):
    """flashcore.attention's shortcut for the common eager call (PyTorch
    tensors; window, kernel overrides and stream left at their defaults):
    the argument checks the general path makes with its helpers, made
    inline. Returns None whenever anything is unusual, and the general path
    then checks again and raises its usual errors."""
    code = _plain_dtype_code(q, k, v, out)
    if code is None:
        return None
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or (out is not None and out.dim() != 4):
        return None
    if layout == "bhsd":
        bshd = False
    elif layout == "bshd":
        bshd = True
    else:
        return None
    if scale is None:
        scale = 0.0
    elif type(scale) is not float or not _isfinite(scale):
        return None
    return _launch_ptrs(q, k, v, out, code, bool(causal), scale, -1, -1, bshd, bool(return_lse), 0, 0, 0)


def _fast_call(q, k, v, out, causal, scale, window_left, window_right, bshd, return_lse,
               block_m, block_n, num_splits):
    """Plain eager calls, straight to the native library: no dispatcher, no
    autograd node, no DLPack capsules (the custom op path costs tens of
    microseconds of host time a call; this one a few). Returns None when the
    call needs the custom op (_plain_dtype_code, _launch_ptrs). The tensors
    are 4-d (checked by the caller)."""
    code = _plain_dtype_code(q, k, v, out)
    if code is None:
        return None
    return _launch_ptrs(q, k, v, out, code, causal, scale, window_left, window_right, bshd, return_lse,
                        block_m, block_n, num_splits)


def _launch_ptrs(q, k, v, out, code, causal, scale, window_left, window_right, bshd, return_lse,
                 block_m, block_n, num_splits):
    """The raw-pointer call for plain tensors (_plain_dtype_code). Returns
    None when autograd records (so backward() reaches the op's error) and for
    a device other than the current CUDA device or the CPU."""
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                            or (out is not None and out.requires_grad)):
        return None
    dev = q.get_device()
    if dev >= 0:
        if _raw_stream is None or dev != _cuda_device():
            return None
        stream = _raw_stream(dev)
    elif q.is_cpu:
        stream = 0
    else:
        return None
    qs = q.shape
    if out is None:
        # empty_like of a contiguous q is the same contiguous tensor as
        # torch.empty(shape, dtype=, device=), for a third of the host time.
        if qs[3] == v.shape[3] and q.is_contiguous():
            out = _empty_like(q)
        else:
            out = torch.empty((qs[0], qs[1], qs[2], v.shape[3]), dtype=q.dtype, device=q.device)
    lse = None
    if return_lse:
        lse = torch.empty(_lse_shape(q, bshd), dtype=torch.float32, device=q.device)
    _C.attention_forward_ptrs(
        q.data_ptr(), qs, q.stride(), dev,
        k.data_ptr(), k.shape, k.stride(), k.get_device(),
        v.data_ptr(), v.shape, v.stride(), v.get_device(),
        out.data_ptr(), out.shape, out.stride(), out.get_device(),
        0 if lse is None else lse.data_ptr(), code, scale, causal,
        window_left, window_right, bshd, block_m, block_n, num_splits, stream,
        _torch_device_allocator(dev) if dev >= 0 else False)
    return (out, lse) if return_lse else out


def _call(q, k, v, *, out, causal, scale, window_left, window_right, bshd, return_lse,
          block_m, block_n, num_splits, stream):
    """The torch branch of :func:`flashcore.attention` (arguments already
    validated by it)."""
    if stream is None:
        res = _fast_call(q, k, v, out, causal, scale, window_left, window_right, bshd, return_lse,
                         block_m, block_n, num_splits)
        if res is not None:
            return res
    kw = dict(causal=causal, scale=scale, window_left=window_left,
              window_right=window_right, bshd=bshd, block_m=block_m, block_n=block_n,
              num_splits=num_splits)
    if stream is not None:
        try:
            stream = operator.index(stream)
        except TypeError:
            raise TypeError(f"stream: expected an int, got {type(stream).__qualname__}") from None
    if stream is not None and q.is_cuda:
        # An explicit cudaStream_t: make it PyTorch's current stream for the
        # call, so that the outputs are allocated for it too.
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=q.device)):
            return _call(q, k, v, out=out, return_lse=return_lse, stream=None, **kw)
    if out is None:
        res, lse = attention(q, k, v, return_lse=return_lse, **kw)
        return (res, lse) if return_lse else res
    lse = None
    if return_lse:
        lse = torch.empty(_lse_shape(q, bshd), dtype=torch.float32, device=q.device)
    attention_into(q, k, v, out, lse, **kw)
    return (out, lse) if return_lse else out
