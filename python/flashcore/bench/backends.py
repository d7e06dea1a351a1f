"""The contenders: flashcore and PyTorch SDPA restricted to one backend each.

Every contender is prepared per shape on the *same* input tensors (see
`Inputs`) and exposes `call(i)`, one attention call on rotation set i, which
the timing layer drives both eagerly and inside graph capture.

flashcore runs as a family: `flashcore` (the plain `flashcore.attention`) on
every suite, and on the decode suite only `flashcore-kv` / `flashcore-paged`
(`flashcore.attention_with_kvcache` over the same K/V as a contiguous cache,
and rearranged into a shuffled page pool). A backend names the suites it
applies to (`Backend.suites`); the runner gives it no row elsewhere.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import List, Optional, Sequence, Tuple

from .suites import Shape

# Bench names -> torch.nn.attention.SDPBackend member names.
SDPA_BACKENDS = {
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
}
FLASHCORE_BACKENDS = ("flashcore", "flashcore-kv", "flashcore-paged")
ALL_BACKENDS = FLASHCORE_BACKENDS + tuple(SDPA_BACKENDS)
BACKEND_ALIASES = {
    "flashcore": "flashcore", "fc": "flashcore",
    "flashcore-kv": "flashcore-kv", "fc-kv": "flashcore-kv",
    "flashcore-paged": "flashcore-paged", "fc-paged": "flashcore-paged",
    "sdpa-flash": "sdpa-flash", "flash": "sdpa-flash", "fa2": "sdpa-flash",
    "sdpa-cudnn": "sdpa-cudnn", "cudnn": "sdpa-cudnn",
    "sdpa-efficient": "sdpa-efficient", "efficient": "sdpa-efficient", "mem-efficient": "sdpa-efficient",
    "sdpa": "sdpa",  # all three SDPA backends
}


# flashcore-paged: tokens per page, and the seed of the page shuffle.
PAGE_SIZE = 64
PAGE_SEED = 1234


class Unavailable(Exception):
    """The contender cannot run at all in this process (not a per-shape refusal)."""


class Refused(Exception):
    """The contender declines this shape; the message is the skip reason."""


def parse_backends(text: Optional[str]) -> List[str]:
    if not text or text.strip().lower() == "all":
        return list(ALL_BACKENDS)
    chosen = set()
    for tok in (t.strip().lower() for t in text.split(",") if t.strip()):
        if tok not in BACKEND_ALIASES:
            raise ValueError(f"unknown backend {tok!r}; choose from {', '.join(ALL_BACKENDS)} (or fc, fc-kv, fc-paged, flash, cudnn, efficient, sdpa)")
        name = BACKEND_ALIASES[tok]
        chosen.update(SDPA_BACKENDS if name == "sdpa" else (name,))
    return [b for b in ALL_BACKENDS if b in chosen]


def torch_dtype(name: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


# ------------------------------------------------------------------ flashcore

def load_flashcore() -> Tuple[Optional[object], Optional[str]]:
    """(module, None) when flashcore.attention is callable, else (None, reason).

    Any exception counts: a lazily loaded compiled extension can raise
    ImportError/OSError from the attribute access itself.
    """
    try:
        fc = importlib.import_module("flashcore")
    except Exception as exc:  # noqa: BLE001
        return None, f"import flashcore failed: {type(exc).__name__}: {exc}"
    try:
        fn = getattr(fc, "attention")
    except Exception as exc:  # noqa: BLE001
        return None, f"flashcore.attention unavailable: {type(exc).__name__}: {exc}"
    if not callable(fn):
        return None, "flashcore.attention is not callable"
    return fc, None


def flashcore_version(fc) -> str:
    if fc is None:
        return "n/a"
    ver = getattr(fc, "__version__", None)
    if ver is None and callable(getattr(fc, "version", None)):
        try:
            ver = fc.version()
        except Exception:  # noqa: BLE001
            ver = None
    return str(ver) if ver is not None else "unknown"


def flashcore_cuda_problem(fc) -> Optional[str]:
    """Reason flashcore cannot run CUDA tensors, if the package tells us.
    `built_with_cuda()` mirrors the C++ API; when absent we find out per call."""
    probe = getattr(fc, "built_with_cuda", None)
    if callable(probe):
        try:
            if not probe():
                return "flashcore was built without the CUDA backend (built_with_cuda() is False)"
        except Exception as exc:  # noqa: BLE001
            return f"flashcore.built_with_cuda() raised {type(exc).__name__}: {exc}"
    return None


# ------------------------------------------------------------------ inputs

class Inputs:
    """`n_sets` independent (q, k, v, out) sets of one shape, from torch.randn.

    Random data on purpose: zeros let the tensor cores draw less power (and so
    clock higher) and make every softmax row uniform, hiding masking bugs.
    """

    def __init__(self, shape: Shape, n_sets: int, seed: int = 0):
        import torch

        dt = torch_dtype(shape.dtype)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        self.shape = shape
        self.n_sets = n_sets
        self.q, self.k, self.v, self.out = [], [], [], []
        for _ in range(n_sets):
            self.q.append(torch.randn(shape.B, shape.H, shape.Sq, shape.D, dtype=dt, device="cuda", generator=gen))
            self.k.append(torch.randn(shape.B, shape.Hkv, shape.Sk, shape.D, dtype=dt, device="cuda", generator=gen))
            self.v.append(torch.randn(shape.B, shape.Hkv, shape.Sk, shape.D, dtype=dt, device="cuda", generator=gen))
            self.out.append(torch.empty(shape.B, shape.H, shape.Sq, shape.D, dtype=dt, device="cuda"))


def _poison_allocator(shape: Shape) -> None:
    """Leave a NaN-filled block of the output's size in the caching allocator.

    SDPA allocates its own output, so we cannot pass a poisoned `out=`; the
    allocator hands a freed block of the same size straight back, so an output
    element the kernel forgets to write reads as NaN and fails the check.
    """
    import torch

    junk = torch.full((shape.B, shape.H, shape.Sq, shape.D), float("nan"),
                      dtype=torch_dtype(shape.dtype), device="cuda")
    del junk


# ------------------------------------------------------------------ contenders

class Prepared:
    """A contender bound to one shape and its input sets."""

    note: str = ""

    def context(self):
        return contextlib.nullcontext()

    def call(self, i: int):  # pragma: no cover - interface
        raise NotImplementedError

    def check_call(self):
        """Poison the output, run on set 0 and return the output tensor."""
        raise NotImplementedError  # pragma: no cover


class Backend:
    name = "?"
    # Suites this contender is run on; None: all of them. Elsewhere it gets
    # no row at all (see `applicable`).
    suites: Optional[Tuple[str, ...]] = None

    def applies_to(self, shape: Shape) -> bool:
        return self.suites is None or shape.suite in self.suites

    def prepare(self, shape: Shape, inputs: Inputs) -> Prepared:  # pragma: no cover
        raise NotImplementedError


class FlashcoreBackend(Backend):
    name = "flashcore"

    def __init__(self, module=None, problem: Optional[str] = None):
        self.fc = module
        self.problem = problem

    def _module(self):
        if self.fc is None or self.problem:
            raise Unavailable(self.problem or "flashcore is not importable")
        return self.fc

    def prepare(self, shape: Shape, inputs: Inputs) -> Prepared:
        return _FlashcorePrepared(self._module(), shape, inputs)


class FlashcoreKvBackend(FlashcoreBackend):
    """flashcore.attention_with_kvcache on the decode suite: the shape's own
    K/V as a contiguous cache (layout "bhsd", capacity = Sk, every sequence
    full), or with `paged` the same data in a pool of PAGE_SIZE-token pages."""

    suites = ("decode",)

    def __init__(self, module=None, problem: Optional[str] = None, paged: bool = False):
        super().__init__(module, problem)
        self.paged = paged
        self.name = "flashcore-paged" if paged else "flashcore-kv"

    def prepare(self, shape: Shape, inputs: Inputs) -> Prepared:
        fc = self._module()
        if not callable(getattr(fc, "attention_with_kvcache", None)):
            raise Unavailable("flashcore.attention_with_kvcache is not available")
        if self.paged and shape.Sk % PAGE_SIZE:
            raise Refused(f"paged cache: Sk={shape.Sk} is not a multiple of the page size {PAGE_SIZE}")
        return _FlashcoreKvPrepared(fc, shape, inputs, self.paged)


class _FlashcorePrepared(Prepared):
    def __init__(self, fc, shape: Shape, inputs: Inputs):
        self.fc = fc
        self.shape = shape
        self.inputs = inputs
        self.use_out = True

    def call(self, i: int):
        x = self.inputs
        if self.use_out:
            # out= keeps the call allocation-free, which is what the library
            # promises for graph capture; the result lands in our poisoned buffer.
            return self.fc.attention(x.q[i], x.k[i], x.v[i], causal=self.shape.causal, out=x.out[i])
        return self.fc.attention(x.q[i], x.k[i], x.v[i], causal=self.shape.causal)

    def check_call(self):
        out0 = self.inputs.out[0]
        out0.fill_(float("nan"))
        try:
            res = self.call(0)
        except TypeError as exc:
            if "out" not in str(exc):
                raise
            # A binding without out=: fall back, keep the fact visible in the row.
            self.use_out = False
            self.note = f"out= not accepted ({exc}); timed without it"
            _poison_allocator(self.shape)
            res = self.call(0)
        if isinstance(res, (tuple, list)):
            res = res[0]
        return out0 if res is None else res


class _FlashcoreKvPrepared(_FlashcorePrepared):
    """Everything the cache call needs is built here, outside every timed
    region: cache_seqlens, and for the paged cache one page pool per rotation
    set plus the block table."""

    def __init__(self, fc, shape: Shape, inputs: Inputs, paged: bool):
        import torch

        super().__init__(fc, shape, inputs)
        # The metadata check of the untimed correctness call only (check_call).
        self.check_metadata = False
        dev = inputs.k[0].device
        self.cache_seqlens = torch.full((shape.B,), shape.Sk, dtype=torch.int32, device=dev)
        self.k_cache, self.v_cache, self.block_table = inputs.k, inputs.v, None
        if paged:
            self.block_table, perm = page_table(shape.B, shape.Sk // PAGE_SIZE, dev)
            self.k_cache = [to_page_pool(t, perm) for t in inputs.k]
            self.v_cache = [to_page_pool(t, perm) for t in inputs.v]

    def call(self, i: int):
        x = self.inputs
        kwargs = {"out": x.out[i]} if self.use_out else {}
        # check=False in the timed calls: the metadata check copies
        # cache_seqlens / block_table to the host and synchronizes the stream,
        # which is no part of the attention (graph capture skips it on its own
        # with check=None anyway). check_call runs it once.
        return self.fc.attention_with_kvcache(x.q[i], self.k_cache[i], self.v_cache[i], self.cache_seqlens,
                                             block_table=self.block_table, causal=self.shape.causal,
                                             layout="bhsd", check=self.check_metadata, **kwargs)

    def check_call(self):
        self.check_metadata = True
        try:
            return super().check_call()
        finally:
            self.check_metadata = False


def page_table(batch: int, pages_per_seq: int, device="cuda", seed: int = PAGE_SEED):
    """(block_table, perm): logical page j = b * pages_per_seq + p (page p of
    sequence b) lives in physical page perm[j] of the pool; block_table is
    perm as a (batch, pages_per_seq) int32 tensor on `device`. A seeded random
    permutation, so neighbouring pages of a sequence are not neighbours in
    memory, as in a serving engine's pool after some churn."""
    import torch

    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    perm = torch.randperm(batch * pages_per_seq, generator=gen).to(device)
    return perm.to(torch.int32).reshape(batch, pages_per_seq), perm


def to_page_pool(t, perm, page_size: int = PAGE_SIZE):
    """(B, Hkv, Sk, D) cache -> page pool (B * Sk / page_size, Hkv, page_size, D),
    the paged layout attention_with_kvcache wants for layout "bhsd"; logical
    page j goes to physical page perm[j]."""
    import torch

    b, h, s, d = t.shape
    n = s // page_size
    pool = torch.empty(b * n, h, page_size, d, dtype=t.dtype, device=t.device)
    # Indexing with perm as (b, n) matches the (b, n, h, page_size, d) view of
    # the cache page for page, so no intermediate copy is made.
    pool[perm.view(b, n)] = t.view(b, h, n, page_size, d).permute(0, 2, 1, 3, 4)
    return pool


class SdpaBackend(Backend):
    def __init__(self, name: str):
        self.name = name
        self.member = SDPA_BACKENDS[name]

    def prepare(self, shape: Shape, inputs: Inputs) -> Prepared:
        return _SdpaPrepared(self.member, shape, inputs)


class _SdpaPrepared(Prepared):
    def __init__(self, member: str, shape: Shape, inputs: Inputs):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.F = F
        self.sdpa_kernel = sdpa_kernel
        self.backend = getattr(SDPBackend, member)
        self.shape = shape
        self.inputs = inputs
        self.k, self.v = inputs.k, inputs.v
        self.gqa = shape.H != shape.Hkv
        self.enable_gqa = self.gqa

    def context(self):
        # Entered once around check, warm-up, timing and capture, so the
        # per-call cost of the context manager is not charged to SDPA.
        return self.sdpa_kernel(self.backend)

    def call(self, i: int):
        kwargs = {"enable_gqa": True} if self.enable_gqa else {}
        return self.F.scaled_dot_product_attention(
            self.inputs.q[i], self.k[i], self.v[i], is_causal=self.shape.causal, **kwargs)

    def check_call(self):
        import torch

        _poison_allocator(self.shape)
        if not self.enable_gqa:
            return self.call(0)
        try:
            out = self.call(0)
            torch.cuda.synchronize()
            return out
        except RuntimeError as exc:
            if is_cuda_failure(exc):
                raise
            refusal = summarize_exception(exc)
        # This backend refuses enable_gqa: expand K/V to the query heads once,
        # here, outside every timed region, and say so in the row. GB/s still
        # counts the un-expanded K/V (the bytes the problem needs).
        g = self.shape.group
        self.k = [t.repeat_interleave(g, dim=1) for t in self.inputs.k]
        self.v = [t.repeat_interleave(g, dim=1) for t in self.inputs.v]
        self.enable_gqa = False
        self.note = f"enable_gqa refused ({refusal}); K/V expanded to {self.shape.H} heads outside timing"
        _poison_allocator(self.shape)
        return self.call(0)


def make_backends(names: Sequence[str], fc_module=None, fc_problem: Optional[str] = None) -> List[Backend]:
    out: List[Backend] = []
    for n in names:
        if n == "flashcore":
            out.append(FlashcoreBackend(fc_module, fc_problem))
        elif n in ("flashcore-kv", "flashcore-paged"):
            out.append(FlashcoreKvBackend(fc_module, fc_problem, paged=n == "flashcore-paged"))
        else:
            out.append(SdpaBackend(n))
    return out


def applicable(backends: Sequence[Backend], shape: Shape) -> List[Backend]:
    """The contenders run on `shape`, in their order."""
    return [be for be in backends if be.applies_to(shape)]


# ------------------------------------------------------------------ errors

def summarize_exception(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    # torch appends long C++ backtraces / "CUDA kernel errors might be
    # asynchronously reported" boilerplate; keep the first sentence-ish part.
    for cut in ("\nException raised from", " Exception raised from", " CUDA kernel errors might"):
        if cut in text:
            text = text.split(cut)[0]
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_cuda_failure(exc: BaseException) -> bool:
    """A device-side failure (illegal address, launch failure, OOM) rather than
    a contender politely refusing a shape."""
    name = type(exc).__name__
    text = str(exc)
    if name in ("OutOfMemoryError", "AcceleratorError"):
        return True
    markers = ("CUDA error", "cudaError", "illegal memory access", "unspecified launch failure",
               "device-side assert", "out of memory", "CUBLAS_STATUS", "CUDNN_STATUS_EXECUTION_FAILED")
    return any(m in text for m in markers)


def classify_failure(backend_name: str, exc: BaseException) -> Tuple[str, str]:
    """('skip' | 'error', reason). A refusal is a skip with its reason; anything
    that smells of a device fault is an error."""
    if isinstance(exc, Refused):
        return "skip", str(exc)
    reason = summarize_exception(exc)
    if isinstance(exc, Unavailable):
        return "n/a", reason
    if is_cuda_failure(exc):
        return "error", reason
    if isinstance(exc, (NotImplementedError, TypeError, ValueError, RuntimeError)):
        return "skip", reason
    return "error", reason

