"""Host time per flashcore.attention call (bf16 and fp16, B1 H1 S128, head
dims 64/128) with the per-device workspace allocator passed, as the fast path
does, against no allocator (False), interleaved in one process: what passing
an allocator costs once the binding validates the arguments only once."""
import statistics, time
import torch
import flashcore
from flashcore import torch_ops
orig = torch_ops._torch_device_allocator
cfgs = {"allocator": orig, "none": lambda dev: False}
q = torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.float16)
k, v = torch.randn_like(q), torch.randn_like(q)
out = torch.empty_like(q)
calls, reps = 200, 41
fns = {"out=": lambda: flashcore.attention(q, k, v, out=out), "alloc": lambda: flashcore.attention(q, k, v)}
res = {(c, w): [] for c in cfgs for w in fns}
for c, f in cfgs.items():
    torch_ops._torch_device_allocator = f
    for fn in fns.values():
        for _ in range(100): fn()
torch.cuda.synchronize()
for r in range(reps):
    for c, f in cfgs.items():
        torch_ops._torch_device_allocator = f
        for w, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls): fn()
            res[(c, w)].append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
torch_ops._torch_device_allocator = orig
print(f"# {torch.cuda.get_device_name(0)}; fp16 B1 H1 S128 D64; {calls} calls x {reps} reps, interleaved; CPU us per call (median / min)")
for (c, w), us in res.items():
    print(f"{c:10s} {w:6s} {statistics.median(us):7.2f} {min(us):7.2f}")
