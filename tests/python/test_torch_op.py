"""flashcore's torch.library custom ops (python/flashcore/torch_ops.py):
torch.compile(fullgraph=True), CUDA-graph capture, PyTorch's current stream,
strided views without copies, the backward error, torch.library.opcheck.

CPU cases run the CPU reference backend (float32) and need only PyTorch;
CUDA cases need a GPU and a CUDA build of flashcore. Everything skips cleanly
without PyTorch (CI has none)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import flashcore
from reference import attention_ref


def test_importing_flashcore_does_not_import_torch():
    # Runs without PyTorch too: flashcore must not import it on its own.
    code = (
        "import sys, numpy as np, flashcore\n"
        "q = np.zeros((1, 2, 8, 64), np.float32)\n"
        "flashcore.attention(q, q, q, causal=True)\n"
        "assert 'torch' not in sys.modules, 'flashcore imported torch'\n"
        "assert 'flashcore.torch_ops' not in sys.modules\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


torch = pytest.importorskip("torch", reason="PyTorch is not installed")
torch_ops = pytest.importorskip("flashcore.torch_ops")

TOL = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _cuda_ok() -> bool:
    return torch.cuda.is_available() and flashcore.built_with_cuda()


# (device, dtype) cases: the CPU reference always, the GPU kernels when present.
CASES = [
    pytest.param("cpu", torch.float32, id="cpu-float32"),
    pytest.param("cuda", torch.float16, id="cuda-float16",
                 marks=pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device or CPU-only build")),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device or CPU-only build")),
]


def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    if not flashcore.built_with_cuda():
        pytest.skip("flashcore was built without the CUDA backend")


def _qkv(device, dtype, b=2, hq=8, hkv=2, sq=100, sk=130, d=64, seed=0, layout="bhsd"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    if layout == "bhsd":
        shapes = [(b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)]
    else:
        shapes = [(b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)]
    return [torch.randn(s, generator=g).to(device=device, dtype=dtype) for s in shapes]


def _ref(q, k, v, causal=False, layout="bhsd"):
    to_bhsd = (lambda t: t) if layout == "bhsd" else (lambda t: t.transpose(1, 2))
    return attention_ref(*(to_bhsd(t).detach().float().cpu().numpy() for t in (q, k, v)), causal=causal)


def _err(got, ref, layout="bhsd"):
    got = got if layout == "bhsd" else got.transpose(1, 2)
    return float(np.max(np.abs(got.detach().float().cpu().numpy().astype(np.float64) - ref)))


# ------------------------------------------------------------------ registration
def test_ops_are_registered():
    schema = str(torch.ops.flashcore.attention.default._schema)
    assert schema.startswith("flashcore::attention(Tensor q, Tensor k, Tensor v")
    assert "-> (Tensor, Tensor)" in schema
    out_schema = str(torch.ops.flashcore.attention_out.default._schema)
    assert re.search(r"Tensor\(a\d*!\) out, Tensor\(a\d*!\)\? lse", out_schema), out_schema


@pytest.mark.parametrize("device,dtype", CASES)
def test_op_matches_reference(device, dtype):
    q, k, v = _qkv(device, dtype)
    out, lse = torch.ops.flashcore.attention(q, k, v, causal=True, return_lse=True)
    assert out.dtype == dtype and out.device == q.device and tuple(out.shape) == tuple(q.shape)
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (2, 8, 100)
    ref, ref_lse = _ref(q, k, v, causal=True)
    assert _err(out, ref) <= TOL[dtype]
    assert np.max(np.abs(lse.cpu().numpy() - ref_lse)) <= 1e-3
    out2, lse2 = torch.ops.flashcore.attention(q, k, v, causal=True)
    assert lse2.numel() == 0 and torch.equal(out, out2)


# ------------------------------------------------------------------ torch.compile
@pytest.mark.parametrize("device,dtype", CASES)
def test_compile_fullgraph_matches_eager_and_reference(device, dtype):
    torch._dynamo.reset()
    q, k, v = _qkv(device, dtype)

    def f(q, k, v):
        # the public function, with other ops around it in the same graph
        out, lse = flashcore.attention(q, k, v, causal=True, return_lse=True)
        return out, lse, out.float().sum(dim=-1) + lse

    # Inductor on the GPU; aot_eager on the CPU (same tracing and fake
    # tensors, without compiling C++ kernels for the surrounding ops).
    backend = "inductor" if device == "cuda" else "aot_eager"
    cf = torch.compile(f, fullgraph=True, backend=backend)
    out_c, lse_c, s_c = cf(q, k, v)
    out_e, lse_e, s_e = f(q, k, v)
    assert torch.equal(out_c, out_e)  # the same kernel on the same inputs
    assert torch.equal(lse_c, lse_e)
    torch.testing.assert_close(s_c, s_e, rtol=1e-5, atol=1e-4)
    ref, _ = _ref(q, k, v, causal=True)
    assert _err(out_c, ref) <= TOL[dtype]
    # a second call with new values reuses the graph and stays correct
    q2, k2, v2 = _qkv(device, dtype, seed=1)
    out_c2 = cf(q2, k2, v2)[0]
    assert _err(out_c2, _ref(q2, k2, v2, causal=True)[0]) <= TOL[dtype]


@pytest.mark.parametrize("device,dtype", CASES[:2])
def test_compile_dynamic_shapes_and_bshd(device, dtype):
    torch._dynamo.reset()
    cf = torch.compile(
        lambda q, k, v: flashcore.attention(q, k, v, causal=True, layout="bshd"),
        fullgraph=True, dynamic=True, backend="aot_eager")
    for sq, sk in ((64, 64), (37, 90), (1, 129)):
        q, k, v = _qkv(device, dtype, sq=sq, sk=sk, layout="bshd")
        out = cf(q, k, v)
        assert tuple(out.shape) == tuple(q.shape)
        assert _err(out, _ref(q, k, v, causal=True, layout="bshd")[0], "bshd") <= TOL[dtype]


@pytest.mark.parametrize("device,dtype", CASES[:2])
def test_compile_with_out(device, dtype):
    torch._dynamo.reset()
    q, k, v = _qkv(device, dtype)

    def f(q, k, v, out):
        flashcore.attention(q, k, v, causal=True, out=out)
        return out * 2

    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    out_c = torch.empty_like(q)
    doubled = cf(q, k, v, out_c)
    ref, _ = _ref(q, k, v, causal=True)
    assert _err(out_c, ref) <= TOL[dtype]
    assert torch.equal(doubled, out_c * 2)


# ------------------------------------------------------------------ opcheck
@pytest.mark.parametrize("device,dtype", CASES[:2])
def test_opcheck(device, dtype):
    q, k, v = _qkv(device, dtype, sq=33, sk=40)
    torch.library.opcheck(torch.ops.flashcore.attention.default, (q, k, v),
                          dict(causal=True, return_lse=True))
    torch.library.opcheck(torch.ops.flashcore.attention.default, (q, k, v), dict(window_left=8))
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    torch.library.opcheck(torch.ops.flashcore.attention_out.default, (q, k, v, out, lse),
                          dict(causal=True))
    torch.library.opcheck(torch.ops.flashcore.attention_out.default, (q, k, v, out, None))


# ------------------------------------------------------------------ no copies
def _record_native_calls(monkeypatch):
    """Records what reaches the native library through either entry point:
    DLPack arrays (the custom op) or raw pointers (the eager fast path)."""
    calls = []
    real = flashcore._C.attention_forward
    real_ptrs = flashcore._C.attention_forward_ptrs

    def spy(q, k, v, out, lse, **kw):
        calls.append(dict(
            path="op",
            ptrs=[t.data_ptr() for t in (q, k, v, out)],
            strides=[tuple(t.stride()) for t in (q, k, v, out)],
            stream=kw.get("stream")))
        return real(q, k, v, out, lse, **kw)

    def spy_ptrs(*a):
        calls.append(dict(path="fast", ptrs=[a[0], a[4], a[8], a[12]],
                          strides=[tuple(a[2]), tuple(a[6]), tuple(a[10]), tuple(a[14])], stream=a[-2]))
        return real_ptrs(*a)

    monkeypatch.setattr(flashcore._C, "attention_forward", spy)
    monkeypatch.setattr(flashcore._C, "attention_forward_ptrs", spy_ptrs)
    return calls


@pytest.mark.parametrize("device,dtype", CASES)
def test_strided_views_are_not_copied(device, dtype, monkeypatch):
    calls = _record_native_calls(monkeypatch)
    b, s, h, hkv, d = 2, 77, 8, 2, 64
    g = torch.Generator().manual_seed(3)
    # One packed projection, (B, S, H + 2*Hkv, D): q, k, v are views into it.
    qkv = torch.randn(b, s, h + 2 * hkv, d, generator=g).to(device=device, dtype=dtype)
    q, k, v = qkv[:, :, :h], qkv[:, :, h:h + hkv], qkv[:, :, h + hkv:]
    assert not q.is_contiguous()
    out = flashcore.attention(q, k, v, causal=True, layout="bshd")
    ref, _ = _ref(q, k, v, causal=True, layout="bshd")
    assert _err(out, ref, "bshd") <= TOL[dtype]
    # BHSD views of the same memory (what transformers hands around)
    out2 = flashcore.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    assert torch.equal(out2.transpose(1, 2), out)
    # out= into a strided view
    big = torch.zeros(b, s, 2 * h, d, device=device, dtype=dtype)
    res = flashcore.attention(q, k, v, causal=True, layout="bshd", out=big[:, :, h:])
    assert torch.equal(big[:, :, h:], out) and not big[:, :, :h].any()
    assert res.data_ptr() == big[:, :, h:].data_ptr()

    assert len(calls) == 3
    assert calls[0]["ptrs"][:3] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    assert calls[0]["strides"][:3] == [q.stride(), k.stride(), v.stride()]
    assert calls[1]["ptrs"][:3] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    assert calls[2]["ptrs"][3] == big[:, :, h:].data_ptr()
    assert calls[2]["strides"][3] == big[:, :, h:].stride()


# ------------------------------------------------------------------ autograd
@pytest.mark.parametrize("device,dtype", CASES[:2])
def test_backward_raises_naming_the_op(device, dtype):
    q, k, v = _qkv(device, dtype)
    q.requires_grad_(True)
    out = flashcore.attention(q, k, v, causal=True)  # the forward itself works
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match=r"flashcore::attention has no backward"):
        out.float().sum().backward()
    # out= as well: the result is linked to the op, so backward reaches it
    buf = torch.empty_like(q, requires_grad=False)
    out = flashcore.attention(q, k, v, causal=True, out=buf)
    with pytest.raises(NotImplementedError, match=r"flashcore::attention has no backward"):
        out.float().sum().backward()
    # no_grad: no graph, no error, and the mutating op writes out in place
    buf = torch.empty_like(q, requires_grad=False)
    with torch.no_grad():
        res = flashcore.attention(q, k, v, causal=True, out=buf)
    assert res is buf and not res.requires_grad


# ------------------------------------------------------------------ CUDA only
def test_split_kv_workspace_allocator_errors(monkeypatch):
    # A decode call splits its keys across CTAs and asks the fast path's
    # allocator (serving._torch_device_allocator) for its workspace, once:
    # an exception from it keeps its type, and an array of the wrong size or
    # on the wrong device is a ValueError; nothing is launched then.
    _need_cuda()
    q, k, v = _qkv("cuda", torch.bfloat16, b=1, hq=32, hkv=8, sq=1, sk=4096, d=128)
    want = flashcore.attention(q, k, v)
    asked = []

    def counting(dev):
        def alloc(nbytes):
            asked.append(nbytes)
            return torch.empty(nbytes, dtype=torch.uint8, device=q.device)
        return alloc

    monkeypatch.setattr(torch_ops, "_torch_device_allocator", counting)
    assert torch.equal(flashcore.attention(q, k, v), want)  # same bits through the counting allocator
    assert len(asked) == 1 and asked[0] > 0

    class Refused(RuntimeError):
        pass

    def raising(nbytes):
        raise Refused("no memory for you")

    bad = {
        "raises": (raising, Refused, "no memory"),
        "short": (lambda n: torch.empty(n - 16, dtype=torch.uint8, device=q.device), ValueError, "bytes for"),
        "host": (lambda n: torch.empty(n, dtype=torch.uint8), ValueError, "CUDA device"),
    }
    for name, (alloc, exc, msg) in bad.items():
        monkeypatch.setattr(torch_ops, "_torch_device_allocator", lambda dev, a=alloc: a)
        out = torch.full_like(want, float("nan"))
        with pytest.raises(exc, match=msg):
            flashcore.attention(q, k, v, out=out)
        torch.cuda.synchronize()
        assert torch.isnan(out).all(), name  # nothing written

    # A call that does not split never asks.
    asked.clear()
    monkeypatch.setattr(torch_ops, "_torch_device_allocator", counting)
    q2, k2, v2 = _qkv("cuda", torch.bfloat16, sq=256, sk=300)
    flashcore.attention(q2, k2, v2)
    assert asked == []


def test_cuda_graph_capture_and_replay():
    _need_cuda()
    q, k, v = _qkv("cuda", torch.bfloat16, sq=256, sk=300)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        flashcore.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = flashcore.attention(q, k, v, causal=True, return_lse=True)
        doubled = out * 2
    for seed in (5, 6):
        q2, k2, v2 = _qkv("cuda", torch.bfloat16, sq=256, sk=300, seed=seed)
        q.copy_(q2), k.copy_(k2), v.copy_(v2)
        graph.replay()
        torch.cuda.synchronize()
        eager, eager_lse = flashcore.attention(q2, k2, v2, causal=True, return_lse=True)
        assert torch.equal(out, eager) and torch.equal(lse, eager_lse)  # deterministic
        assert torch.equal(doubled, eager * 2)
        assert _err(out, _ref(q2, k2, v2, causal=True)[0]) <= TOL[torch.bfloat16]


def test_compile_reduce_overhead_cuda_graphs():
    _need_cuda()
    torch._dynamo.reset()
    cf = torch.compile(lambda q, k, v: flashcore.attention(q, k, v, causal=True) * 1.5,
                       fullgraph=True, mode="reduce-overhead")
    for seed in range(3):
        q, k, v = _qkv("cuda", torch.float16, seed=seed)
        got = cf(q, k, v).clone()
        assert torch.equal(got, flashcore.attention(q, k, v, causal=True) * 1.5)


def _spin(stream, ms=100):
    # Keeps `stream` busy: anything queued behind it waits.
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(ms * 1e-3 * 2e9))


@pytest.mark.parametrize("how", ["current-stream", "stream-argument"])
def test_runs_on_the_right_stream(how, monkeypatch):
    _need_cuda()
    calls = _record_native_calls(monkeypatch)
    q, k, v = _qkv("cuda", torch.float16)
    q_new = _qkv("cuda", torch.float16, seed=9)[0]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    # On s: a long spin, then q is overwritten. If flashcore ran on any
    # other stream it would read the old q before the copy happens.
    _spin(s)
    with torch.cuda.stream(s):
        q.copy_(q_new)
    if how == "current-stream":
        with torch.cuda.stream(s):
            out = flashcore.attention(q, k, v, causal=True)
    else:
        out = flashcore.attention(q, k, v, causal=True, stream=s.cuda_stream)
    assert calls[-1]["stream"] == s.cuda_stream
    s.synchronize()
    assert _err(out, _ref(q_new, k, v, causal=True)[0]) <= TOL[torch.float16]


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2),
                    reason="needs two CUDA devices")
def test_runs_on_the_tensors_device():
    _need_cuda()
    q, k, v = _qkv("cuda:1", torch.float16)
    with torch.cuda.device(0):
        out = flashcore.attention(q, k, v, causal=True)
        cf = torch.compile(lambda q, k, v: flashcore.attention(q, k, v, causal=True),
                           fullgraph=True, backend="aot_eager")
        out_c = cf(q, k, v)
    torch.cuda.synchronize(1)
    assert out.device == q.device and torch.equal(out, out_c)
    assert _err(out, _ref(q, k, v, causal=True)[0]) <= TOL[torch.float16]


# ------------------------------------------------------------------ eager fast path
@pytest.mark.parametrize("device,dtype", CASES)
def test_eager_fast_path_matches_the_custom_op_bitwise(device, dtype, monkeypatch):
    """Plain eager calls skip the dispatcher and DLPack (torch_ops._fast_call);
    they must give bit for bit what the custom op gives, LSE and out= included,
    and must really take the fast path (while autograd records, they must not)."""
    from flashcore import torch_ops

    calls = _record_native_calls(monkeypatch)
    q, k, v = _qkv(device, dtype, sq=37, sk=50)
    for layout in ("bhsd", "bshd"):
        args = (q, k, v) if layout == "bhsd" else tuple(t.transpose(1, 2) for t in (q, k, v))
        kw = dict(causal=True, layout=layout, return_lse=True, window=(20, -1))
        monkeypatch.setattr(torch_ops, "_fast_path", True)
        fast, fast_lse = flashcore.attention(*args, **kw)
        fast_out = torch.full_like(fast, float("nan"))
        flashcore.attention(*args, out=fast_out, **kw)
        monkeypatch.setattr(torch_ops, "_fast_path", False)
        slow, slow_lse = flashcore.attention(*args, **kw)
        assert torch.equal(fast, slow) and torch.equal(fast_lse, slow_lse) and torch.equal(fast_out, slow)
        assert fast_lse.shape == slow_lse.shape == (q.shape[0], q.shape[1], q.shape[2])
    assert [c["path"] for c in calls] == ["fast", "fast", "op"] * 2

    # Autograd recording goes through the op (whose backward raises).
    monkeypatch.setattr(torch_ops, "_fast_path", True)
    del calls[:]
    qg = q.detach().clone().requires_grad_(True)
    res = flashcore.attention(qg, k, v)
    assert [c["path"] for c in calls] == ["op"]
    with pytest.raises(NotImplementedError, match="no backward"):
        res.sum().backward()
    # The same errors as the op path: a dtype mismatch is named.
    with pytest.raises((TypeError, ValueError), match="k"):
        flashcore.attention(q, k.float() if dtype != torch.float32 else k.half(), v)


@pytest.mark.parametrize("device,dtype", CASES)
def test_eager_shortcut_matches_the_custom_op_bitwise(device, dtype, monkeypatch):
    """Calls with window, overrides and stream at their defaults take
    torch_ops._eager (checks inline, then the raw-pointer call): bit for bit
    the custom op's results, a contiguous output like the op's, and for
    anything unusual the general path with its usual errors."""
    from flashcore import torch_ops

    flashcore.attention(*_qkv(device, dtype, sq=5, sk=5))  # imports torch_ops: the shortcut is armed
    eager_calls = []
    real_eager = torch_ops._eager

    def spy(*a):
        res = real_eager(*a)
        eager_calls.append(res is not None)
        return res

    monkeypatch.setattr(torch_ops, "_eager", spy)
    calls = _record_native_calls(monkeypatch)
    q, k, v = _qkv(device, dtype, sq=37, sk=50, seed=4)
    cases = [
        ((q, k, v), dict()),
        ((q, k, v), dict(causal=True, scale=0.3, return_lse=True)),
        (tuple(t.transpose(1, 2) for t in (q, k, v)), dict(layout="bshd", causal=True)),  # strided views
        (tuple(t.transpose(1, 2).contiguous() for t in (q, k, v)), dict(layout="bshd", return_lse=True)),
    ]
    for args, kw in cases:
        monkeypatch.setattr(torch_ops, "_fast_path", True)
        fast = flashcore.attention(*args, **kw)
        fast_into = torch.full_like(fast[0] if isinstance(fast, tuple) else fast, float("nan"))
        flashcore.attention(*args, out=fast_into, **kw)
        monkeypatch.setattr(torch_ops, "_fast_path", False)
        slow = flashcore.attention(*args, **kw)
        fast, slow = (fast, slow) if isinstance(fast, tuple) else ((fast,), (slow,))
        for a, b in zip(fast, slow):
            assert torch.equal(a, b) and a.stride() == b.stride() and a.is_contiguous()
        assert torch.equal(fast_into, slow[0])
    assert [c["path"] for c in calls] == ["fast", "fast", "op"] * len(cases)
    assert eager_calls == [True, True, False] * len(cases)  # _fast_path off: the shortcut declines

    # Unusual arguments go the general way (fast path still), same results.
    monkeypatch.setattr(torch_ops, "_fast_path", True)
    del eager_calls[:], calls[:]
    ref = flashcore.attention(q, k, v, scale=0.5)
    assert torch.equal(flashcore.attention(q, k, v, scale=torch.tensor(0.5).item()), ref)
    assert torch.equal(flashcore.attention(q, k, v, scale=np.float32(0.5)), ref)  # not a Python float
    assert torch.equal(flashcore.attention(*(t.transpose(1, 2) for t in (q, k, v)), layout="BSHD", scale=0.5),
                       ref.transpose(1, 2))
    assert eager_calls == [True, True, False, False]
    assert [c["path"] for c in calls] == ["fast"] * 4
    # ... and bad ones raise what the general path raises.
    with pytest.raises(ValueError, match=r"q: expected a 4-d array"):
        flashcore.attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"scale: must be finite"):
        flashcore.attention(q, k, v, scale=float("inf"))
    with pytest.raises(ValueError, match=r"layout: expected 'bhsd' or 'bshd'"):
        flashcore.attention(q, k, v, layout="sbhd")
