"""Temporary: host time per flashcore.attention call with the workspace
allocator made per call (as landed), cached per device, or not passed."""
import statistics, sys, time
import torch
import flashcore
from flashcore import torch_ops
orig = torch_ops._workspace_allocator
cache = {}
def cached(lib, like, stream=None):
    f = cache.get(like.get_device())
    if f is None:
        f = cache[like.get_device()] = orig(lib, like, stream)
    return f
cfgs = {"per-call": orig, "cached": cached, "none": lambda lib, like, stream=None: False}
q = torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16)
k, v = torch.randn_like(q), torch.randn_like(q)
out = torch.empty_like(q)
calls, reps = 200, 31
res = {(c, w): [] for c in cfgs for w in ("out=", "alloc")}
fns = {"out=": lambda: flashcore.attention(q, k, v, out=out), "alloc": lambda: flashcore.attention(q, k, v)}
for _ in range(3):
    for c, f in cfgs.items():
        torch_ops._workspace_allocator = f
        for w, fn in fns.items():
            for _ in range(50): fn()
torch.cuda.synchronize()
for r in range(reps):
    for c, f in cfgs.items():
        torch_ops._workspace_allocator = f
        for w, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls): fn()
            res[(c, w)].append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
torch_ops._workspace_allocator = orig
print(f"# {torch.cuda.get_device_name(0)}; {calls} calls x {reps} reps, interleaved; CPU us per call (median / min)")
for (c, w), us in res.items():
    print(f"{c:10s} {w:6s} {statistics.median(us):7.2f} {min(us):7.2f}")
