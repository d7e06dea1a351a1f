"""One process of tools/variant-ab/run: times flashcore (the build on
PYTHONPATH) and SDPA's cuDNN backend on the same inputs, shape by shape, and
prints one line: `variant tag:flashcore_us/cudnn_us=ratio ...`.

Small shapes: CUDA graph of 20 calls over 4 input sets (L2-resident), median
of 60 replays; decode rows (kv*/kvh*: the KV-cache entry over a BSHD/BHSD
cache, kv1*/kvh1*: the same with num_splits=1, pg*: over a page pool, d*:
the plain entry):
graphs over enough input sets to miss L2; large ones: events around each call, median of $TRIALS (200,
the benchmark's count: with 25 the card ran ~100 MHz faster and a 1-4%
difference between two head-dim-256 kernels changed sign, docs/kernels.md). Each
output is first checked against cuDNN's (relative Frobenius error < 2e-2, a
sanity check: the GPU tests compare with float64; NO_CHECK=1 times a
diagnostic variant that is wrong on purpose, such as no-softmax.patch); a shape whose
configuration is not compiled in the variant prints n/a.

  python time_shapes.py VARIANT [TAG,TAG,...]
  python time_shapes.py --table variant-ab.txt   # flashcore us per variant and round
"""
import hashlib
import os
import random
import statistics
import sys

# (tag, dtype, batch, heads, seqlen, head_dim, causal, tile overrides):
# each shape is timed with dispatch's tile, then once per override, tagged
# with an m<block_m> suffix (nB16S512m64) for an int, n<block_n> for a
# string "n<block_n>" (nB8S2048D256n64). An override is a tile dispatch does
# not pick for that shape (head dim 64 takes 192 rows without a mask from 512
# tokens and causal from 2k: its overrides there are the 128-row tile).
# "p<MiB>" is no tile but a placement: dispatch's tile on the same shape with
# a pad of that many MiB allocated before the inputs, so they (and cuDNN's
# copies of them) lie elsewhere in DRAM (kvhB16S4096p3).
BASE = [
    ("nB1S128", "fp16", 1, 16, 128, 64, False, ()),
    ("nB1S256", "fp16", 1, 16, 256, 64, False, ()),
    ("nB1S512", "fp16", 1, 16, 512, 64, False, ()),
    ("nB1S1024", "fp16", 1, 16, 1024, 64, False, (64,)),
    ("cB1S512", "fp16", 1, 16, 512, 64, True, ()),
    ("nB2S1024", "fp16", 2, 16, 1024, 64, False, ()),
    ("nB1S2048", "fp16", 1, 16, 2048, 64, False, ()),
    ("cB1S1024", "fp16", 1, 16, 1024, 64, True, ()),
    ("nB8S128", "fp16", 8, 16, 128, 64, False, (64,)),
    ("nB16S128", "fp16", 16, 16, 128, 64, False, (64,)),
    ("nB32S128", "fp16", 32, 16, 128, 64, False, (64,)),
    ("cB32S128", "fp16", 32, 16, 128, 64, True, (64,)),
    ("nB8S256", "fp16", 8, 16, 256, 64, False, (64,)),
    ("nB16S256", "fp16", 16, 16, 256, 64, False, (64,)),
    ("nB32S256", "fp16", 32, 16, 256, 64, False, (64,)),
    ("nB8S512", "fp16", 8, 16, 512, 64, False, (64,)),
    ("nB16S512", "fp16", 16, 16, 512, 64, False, (64, 192)),
    ("nB32S512", "fp16", 32, 16, 512, 64, False, (64, 192)),
    ("nB32S512D64", "bf16", 32, 32, 512, 64, False, (64, 128)),
    ("nB16S1024D64", "bf16", 16, 32, 1024, 64, False, (64,)),
    ("nB8S2048D64", "bf16", 8, 32, 2048, 64, False, (128,)),
    ("nB4S4096D64", "bf16", 4, 32, 4096, 64, False, (64, 128)),
    ("nB2S8192D64", "bf16", 2, 32, 8192, 64, False, ()),
    ("nB1S16384D64", "bf16", 1, 32, 16384, 64, False, (128,)),
    ("cB32S512D64", "bf16", 32, 32, 512, 64, True, (64, 192)),
    ("cB16S1024D64", "bf16", 16, 32, 1024, 64, True, (64, 192)),
    ("cB8S2048D64", "bf16", 8, 32, 2048, 64, True, (64, 128)),
    ("cB4S4096D64", "bf16", 4, 32, 4096, 64, True, (128,)),
    ("cB2S8192D64", "bf16", 2, 32, 8192, 64, True, ()),
    ("cB1S16384D64", "bf16", 1, 32, 16384, 64, True, (128,)),
    ("nB32S512D128", "bf16", 32, 16, 512, 128, False, ()),
    ("nB16S1024D128", "bf16", 16, 16, 1024, 128, False, ()),
    ("nB8S2048D128", "bf16", 8, 16, 2048, 128, False, ()),
    ("nB4S4096D128", "bf16", 4, 16, 4096, 128, False, ()),
    ("nB2S8192D128", "bf16", 2, 16, 8192, 128, False, ()),
    ("nB1S16384D128", "bf16", 1, 16, 16384, 128, False, ()),
    ("hB8S2048D128", "fp16", 8, 16, 2048, 128, False, ()),
    ("hB4S4096D128", "fp16", 4, 16, 4096, 128, False, ()),
    ("hB2S8192D128", "fp16", 2, 16, 8192, 128, False, ()),
    ("hB1S16384D128", "fp16", 1, 16, 16384, 128, False, ()),
    ("cB4S4096D128", "bf16", 4, 16, 4096, 128, True, ()),
    ("cB32S512D128", "bf16", 32, 16, 512, 128, True, ()),
    ("cB16S1024D128", "bf16", 16, 16, 1024, 128, True, ()),
    ("cB8S2048D128", "bf16", 8, 16, 2048, 128, True, ()),
    ("cB2S8192D128", "bf16", 2, 16, 8192, 128, True, ()),
    ("cB1S16384D128", "bf16", 1, 16, 16384, 128, True, ()),
    ("nB32S512D256", "bf16", 32, 8, 512, 256, False, ("n80",)),
    ("nB16S1024D256", "bf16", 16, 8, 1024, 256, False, ("n80",)),
    ("nB8S2048D256", "bf16", 8, 8, 2048, 256, False, ("n64",)),
    ("nB4S4096D256", "bf16", 4, 8, 4096, 256, False, ()),
    ("nB2S8192D256", "bf16", 2, 8, 8192, 256, False, ()),
    ("nB1S16384D256", "bf16", 1, 8, 16384, 256, False, ()),
    ("cB32S512D256", "bf16", 32, 8, 512, 256, True, ("n80",)),
    ("cB16S1024D256", "bf16", 16, 8, 1024, 256, True, ("n80",)),
    ("cB8S2048D256", "bf16", 8, 8, 2048, 256, True, ("n80",)),
    ("cB4S4096D256", "bf16", 4, 8, 4096, 256, True, ("n64",)),
    ("cB2S8192D256", "bf16", 2, 8, 8192, 256, True, ()),
    ("cB1S16384D256", "bf16", 1, 8, 16384, 256, True, ()),
    # decode, bf16, 32 query heads on 8 KV heads, head dim 128: the cache
    # entry (kv*, a contiguous BSHD cache) and the plain entry (d*); the
    # causal field names the entry point
    ("kvB1S4096", "bf16", 1, 32, 4096, 128, "kv", ()),
    ("kvB1S32768", "bf16", 1, 32, 32768, 128, "kv", ()),
    ("kvB16S4096", "bf16", 16, 32, 4096, 128, "kv", ()),
    ("kvB64S4096", "bf16", 64, 32, 4096, 128, "kv", ()),
    # the cache entry with num_splits=1: one tile walks a whole sequence,
    # no chunks and no merges (what the fold costs, against kv* above)
    ("kv1B16S4096", "bf16", 16, 32, 4096, 128, "kv1", ()),
    ("kv1B64S4096", "bf16", 64, 32, 4096, 128, "kv1", ()),
    ("kv1B16S32768", "bf16", 16, 32, 32768, 128, "kv1", ()),
    # the cache entry over a contiguous BHSD cache (the benchmark's kv row
    # and the paged pool's layout)
    # (with pads: the same shape at other places in DRAM, both backends)
    ("kvhB16S4096", "bf16", 16, 32, 4096, 128, "kvh", ("p3", "p10", "p33", "p100", "p333")),
    ("kvh1B16S4096", "bf16", 16, 32, 4096, 128, "kvh1", ()),
    ("kvhB64S4096", "bf16", 64, 32, 4096, 128, "kvh", ()),
    ("dB1S4096", "bf16", 1, 32, 4096, 128, "plain", ()),
    ("dB1S32768", "bf16", 1, 32, 32768, 128, "plain", ()),
    ("dB16S4096", "bf16", 16, 32, 4096, 128, "plain", ()),
    # the cache entry over a paged pool (the benchmark's: 64-key pages,
    # shuffled), BHSD
    ("pgB1S4096", "bf16", 1, 32, 4096, 128, "paged", ()),
    ("pgB1S32768", "bf16", 1, 32, 32768, 128, "paged", ()),
    ("pgB16S4096", "bf16", 16, 32, 4096, 128, "paged", ("p3", "p10", "p33", "p100", "p333")),
    ("pgB64S4096", "bf16", 64, 32, 4096, 128, "paged", ()),
    # pages of 16 keys (read in 16-key chunks; kernel_traits.h PageChunk)
    ("pg16B16S4096", "bf16", 16, 32, 4096, 128, "paged16", ()),
    # diagnostics of the paged cost: the pages in order (pool page j holds
    # logical page j: DRAM placement as a contiguous cache's, per page) and
    # pages of 128 keys (one page a key block: half the lookups)
    ("pgidB16S4096", "bf16", 16, 32, 4096, 128, "pagedid", ()),
    ("pg128B16S4096", "bf16", 16, 32, 4096, 128, "paged128", ()),
    # one page a sequence (the pool is the contiguous BHSD cache, page size
    # = S, block table = identity): the kvh* cache read through the paged
    # path, in 64-key chunks (each K/V block as 4 TMA boxes, a row's two
    # 128-byte halves requested one box apart instead of 16 KiB apart)
    ("pgwB16S4096", "bf16", 16, 32, 4096, 128, "pagedwhole", ()),
    ("pgwB64S4096", "bf16", 64, 32, 4096, 128, "pagedwhole", ()),
]
BASE += [
    # The variable-length entry (attention_varlen) over packed BSHD copies of
    # the same inputs, B sequences of S tokens (vc*: causal, vn*: no mask),
    # or of S*(j+1)/B tokens for sequence j (vm*: causal, mixed lengths; its
    # cuDNN column is the padded B x S batch, context only).
    (f"{p}B{b}S{s}D{d}", "bf16", b, h, s, d, p, ())
    for p in ("vc", "vm") for d, h in ((64, 32), (128, 16), (256, 8))
    for b, s in ((32, 512), (16, 1024), (8, 2048), (4, 4096), (2, 8192))
] + [("vnB32S512D128", "bf16", 32, 16, 512, 128, "vn", ()), ("vnB4S4096D128", "bf16", 4, 16, 4096, 128, "vn", ())] + [
    # Mixed lengths without a mask (vu*: S*(j+1)/B tokens), and random lengths
    # (vr*: causal, vq*: no mask; sequence j of a fixed draw from S/16 to S
    # tokens, the same every run: _lengths), as serving prefill batches are.
    (f"{p}B{b}S{s}D{d}", "bf16", b, h, s, d, p, ())
    for p in ("vu", "vr", "vq") for d, h in ((64, 32), (128, 16), (256, 8))
    for b, s in ((32, 1024), (16, 2048), (8, 4096), (4, 8192))
]
BASE += [
    # Chunked prefill over a KV cache (kp<C>*: causal, C new query tokens a
    # sequence against its cached keys, which include the chunk: cache_seqlens
    # a fixed draw from S/16 to S (_lengths "random", at least C); BHSD cache,
    # no GQA). Timed alone: the cuDNN column repeats flashcore's time.
    (f"kp{c}B{b}S{s}D{d}", "bf16", b, h, s, d, f"kp{c}", ())
    for c in (512, 1024) for d, h in ((64, 32), (128, 16), (256, 8))
    for b, s in ((8, 8192), (16, 8192), (8, 16384))
]
KVPREFILL = {"kp512": 512, "kp1024": 1024}
# The variable-length entry: tag -> (causal, lengths: "same" S each, "ramp"
# S*(j+1)/B for sequence j, "random" _lengths).
VARLEN = {"vc": (True, "same"), "vn": (False, "same"), "vm": (True, "ramp"), "vu": (False, "ramp"),
          "vr": (True, "random"), "vq": (False, "random")}


def _lengths(kind, B, S):
    """Sequence lengths of a varlen row (VARLEN): for "random", a draw seeded
    by (B, S) alone, so every run and variant times the same batch."""
    if kind == "same":
        return [S] * B
    if kind == "ramp":
        return [S * (j + 1) // B for j in range(B)]
    rng = random.Random(B * 100003 + S)
    return [rng.randint(max(1, S // 16), S) for _ in range(B)]
# The cache entry over a contiguous cache: tag -> (layout, num_splits).
CACHE = {"kv": ("bshd", None), "kv1": ("bshd", 1), "kvh": ("bhsd", None), "kvh1": ("bhsd", 1)}
# ... over a BHSD page pool: tag -> (page size: "bench" the benchmark's,
# "seq" one page a sequence; whether the pages lie in order, else shuffled).
PAGED = {"paged": ("bench", False), "paged16": (16, False), "pagedid": ("bench", True),
         "paged128": (128, False), "pagedwhole": ("seq", True)}
DECODE_KV_HEADS = 8  # of the decode rows


def _override(o):
    """(tag suffix, block_m, block_n, pad MiB) of one override: None, an int
    block_m, "n<block_n>" or "p<MiB>"."""
    if o is None:
        return "", None, None, 0
    if isinstance(o, str):
        return (o, None, None, int(o[1:])) if o[0] == "p" else (o, None, int(o[1:]), 0)
    return f"m{o}", o, None, 0


# (tag, dtype, batch, heads, seqlen, head_dim, causal, block_m or None, block_n or None, pad MiB)
SHAPES = [(tag + suffix, *shape, bm, bn, pad)
          for tag, *shape, overrides in BASE for o in (None, *overrides)
          for suffix, bm, bn, pad in [_override(o)]]

def table(path):
    """flashcore us per (tag, variant), one value per round, from run's log."""
    rows, variants, bits = {}, [], {}
    for line in open(path):
        parts = line.split()
        # Result lines only: "variant tag:...", not comments or ptxas lines.
        if len(parts) < 2 or line.startswith("#") or ":" in parts[0] or ":" not in parts[1]:
            continue
        if parts[0] not in variants:
            variants.append(parts[0])
        for p in parts[1:]:
            tag, val = p.split(":", 1)
            if val[:1].isdigit():
                rows.setdefault(tag, {}).setdefault(parts[0], []).append(float(val.split("/")[0]))
                if "#" in val:
                    bits.setdefault(tag, {}).setdefault(val.split("#")[1], []).append(parts[0])
    if not variants:
        print(f"no timed rows in {path}")
        return
    # Columns as wide as their widest cell (four rounds overran a fixed
    # width), then each variant's median over rounds against the first's.
    cells = {tag: ["/".join(f"{x:.1f}" for x in d[v]) if v in d else "-" for v in variants]
             for tag, d in rows.items()}
    width = max([len(v) for v in variants] + [len(c) for cs in cells.values() for c in cs]) + 2
    print("flashcore us per call (one value per round), then medians over rounds (vs " + variants[0] + ")")
    print("shape".ljust(20) + "".join(v.rjust(width) for v in variants) + "".join(v.rjust(18) for v in variants))
    for tag, d in rows.items():
        base = statistics.median(d[variants[0]]) if variants[0] in d else None

        def median_cell(v):
            if v not in d:
                return "-"
            m = statistics.median(d[v])
            return f"{m:.1f}" + (f" ({m / base - 1:+.1%})" if base and v != variants[0] else "")

        meds = [median_cell(v) for v in variants]
        print(tag.ljust(20) + "".join(c.rjust(width) for c in cells[tag]) + "".join(m.rjust(18) for m in meds))
    differ = {tag: fps for tag, fps in bits.items() if len(fps) > 1}
    print(f"output bits: {len(bits) - len(differ)} of {len(bits)} shapes identical across variants and rounds")
    for tag, fps in differ.items():
        print(f"  {tag} differs: " + "; ".join(f"{fp}: {' '.join(sorted(set(v)))}" for fp, v in fps.items()))


def _fingerprint(got):
    """The output's bits, which table() compares across variants."""
    return hashlib.sha1(got.cpu().numpy().tobytes()).hexdigest()[:12]


def _bad(tag, got, ref):
    """The row's BAD cell when flashcore's output is off the reference (and
    NO_CHECK=1 is not set), else None."""
    err = ((got - ref).norm() / ref.norm()).item()
    return f"{tag}:BAD{err:.1e}" if not err < 2e-2 and os.environ.get("NO_CHECK") != "1" else None


def _kv_prefill(tag, B, H, S, D, C, dtype, torch, F, flashcore, time_eager):
    """One kp* row: flashcore's chunked prefill over a BHSD cache, checked
    against SDPA on each sequence alone (bottom-right causal mask)."""
    lens = [max(n, C) for n in _lengths("random", B, S)]
    q = torch.randn(B, H, C, D, device="cuda", dtype=dtype)
    kc = torch.randn(B, H, S, D, device="cuda", dtype=dtype)
    vc = torch.randn(B, H, S, D, device="cuda", dtype=dtype)
    cl = torch.tensor(lens, dtype=torch.int32, device="cuda")
    o = torch.empty(B, H, C, D, device="cuda", dtype=dtype)

    def fc(i=0):
        return flashcore.attention_with_kvcache(q, kc, vc, cl, causal=True, layout="bhsd", out=o, check=False)

    got = fc().float()
    refs = []
    for b, n in enumerate(lens):
        allowed = torch.arange(n, device="cuda")[None, :] <= (n - C + torch.arange(C, device="cuda"))[:, None]
        refs.append(F.scaled_dot_product_attention(q[b:b + 1], kc[b:b + 1, :, :n], vc[b:b + 1, :, :n],
                                                   attn_mask=allowed))
    bad = _bad(tag, got, torch.cat(refs).float())
    if bad:
        return bad
    trials = int(os.environ.get("TRIALS", "200"))
    a = time_eager(fc, 1, trials=trials, warmup=10).median
    return f"{tag}:{a:.2f}/{a:.2f}=1.000#{_fingerprint(got)}"


def main():
    if sys.argv[1] == "--table":
        return table(sys.argv[2])
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
    unknown = sorted((only or set()) - {shape[0] for shape in SHAPES})
    if unknown:  # a tag this copy does not define would silently go untimed
        sys.exit(f"time_shapes.py: unknown shape tags: {','.join(unknown)}")
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashcore
    from flashcore.bench.timing import time_eager, time_graph
    from flashcore.bench.backends import PAGE_SIZE, page_table, to_page_pool

    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}

    out = [sys.argv[1]]
    torch.manual_seed(0)
    for tag, dt, B, H, S, D, causal, bm, bn, pad_mib in SHAPES:
        if only and tag not in only:
            continue
        pad = torch.empty(pad_mib << 20, dtype=torch.uint8, device="cuda") if pad_mib else None
        if causal in KVPREFILL:
            out.append(_kv_prefill(tag, B, H, S, D, KVPREFILL[causal], dtypes[dt], torch, F, flashcore, time_eager))
            continue
        decode = causal == "plain" or causal in CACHE or causal in PAGED
        if decode:  # one query a sequence, S keys, timed in graphs over enough sets to miss L2 (50 MB)
            hk = DECODE_KV_HEADS
            small, sets = True, min(8, -(-96 * 2**20 // (2 * B * hk * S * D * 2)))
            t = [torch.randn(B, h, sq, D, device="cuda", dtype=dtypes[dt])
                 for _ in range(sets) for h, sq in ((H, 1), (hk, S), (hk, S))]
            o = torch.empty(B, H, 1, D, device="cuda", dtype=dtypes[dt])
            # The cache entry over a BSHD cache gets BSHD copies of the same inputs.
            if causal in CACHE and CACHE[causal][0] == "bshd":
                cache = [x.transpose(1, 2).contiguous() for x in t]
                o_bshd = torch.empty(B, 1, H, D, device="cuda", dtype=dtypes[dt])
            lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
            if causal in PAGED:
                size, in_order = PAGED[causal]
                page = {"bench": PAGE_SIZE, "seq": S}.get(size, size)
                if in_order:
                    perm = torch.arange(B * (S // page), device="cuda")
                    btab = perm.to(torch.int32).reshape(B, S // page)
                else:
                    btab, perm = page_table(B, S // page, "cuda")
                pools = [to_page_pool(x, perm, page) if j % 3 else x for j, x in enumerate(t)]
        else:
            small = B * H * S * S * D < 2**31
            sets = 4 if small else 1
            t = [torch.randn(B, H, S, D, device="cuda", dtype=dtypes[dt]) for _ in range(3 * sets)]
            o = torch.empty(B, H, S, D, device="cuda", dtype=dtypes[dt])

        if causal in VARLEN:
            vl_causal, kind = VARLEN[causal]
            lens = _lengths(kind, B, S)
            cu = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()

            def packed(x):  # (B, H, S, D) -> (tokens, H, D): sequence j's first lens[j] rows
                return torch.cat([x[j, :, :n].transpose(0, 1) for j, n in enumerate(lens)]).contiguous()

            vt = [packed(x) for x in t]
            vo = torch.empty_like(vt[0])

        def fc(i):
            if causal in VARLEN:
                return flashcore.attention_varlen(vt[3 * i], vt[3 * i + 1], vt[3 * i + 2], cu, cu, S, S,
                                                  causal=vl_causal, out=vo, check=False)
            if causal in CACHE:
                layout, splits = CACHE[causal]
                src, dst = (cache, o_bshd) if layout == "bshd" else (t, o)
                got = flashcore.attention_with_kvcache(src[3 * i], src[3 * i + 1], src[3 * i + 2], lens,
                                                       layout=layout, out=dst, num_splits=splits)
                return got.transpose(1, 2) if layout == "bshd" else got
            if causal in PAGED:
                return flashcore.attention_with_kvcache(t[3 * i], pools[3 * i + 1], pools[3 * i + 2], lens,
                                                        block_table=btab, layout="bhsd", check=False, out=o)
            return flashcore.attention(t[3 * i], t[3 * i + 1], t[3 * i + 2], causal=causal is True, out=o,
                                       block_m=bm, block_n=bn)

        masked = causal is True or (causal in VARLEN and VARLEN[causal][0])

        def cudnn(i):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(t[3 * i], t[3 * i + 1], t[3 * i + 2], is_causal=masked,
                                                      enable_gqa=decode)

        try:
            got = fc(0).float()
        except Exception:  # not compiled in this variant
            out.append(f"{tag}:n/a")
            continue
        # Every variant so far changes scheduling, not arithmetic: the output
        # bits must match across variants (table() compares the fingerprints).
        bits = _fingerprint(got)
        if causal in VARLEN and not VARLEN[causal][0] and VARLEN[causal][1] != "same":
            # Unmasked mixed lengths: in the padded batch a sequence would
            # also see the padding's keys, so each sequence alone.
            ref = torch.cat([F.scaled_dot_product_attention(*(x[j:j + 1, :, :n] for x in t[:3]))[0].transpose(0, 1)
                             for j, n in enumerate(lens)]).float()
        else:
            ref = cudnn(0)
            ref = (packed(ref) if causal in VARLEN else ref).float()
        bad = _bad(tag, got, ref)
        if bad:
            out.append(bad)
            continue
        if small:
            a, b = (time_graph(f, sets, replays=60, calls_per_graph=20).median for f in (fc, cudnn))
        else:
            trials = int(os.environ.get("TRIALS", "200"))
            a, b = (time_eager(f, 1, trials=trials, warmup=10).median for f in (fc, cudnn))
        out.append(f"{tag}:{a:.2f}/{b:.2f}={b / a:.3f}#{bits}")
        del t, o, pad
    print(" ".join(out), flush=True)


if __name__ == "__main__":
    main()
