"""Hugging Face transformers integration (python/flashcore/hf.py): a small
Llama-architecture model built from a config with random weights (nothing
is downloaded), attn_implementation="fcore" against "sdpa".

Runs on the CPU reference backend (float32) with PyTorch and transformers
installed, and on the GPU (bfloat16) when there is one; skips cleanly
otherwise (CI has neither)."""

from __future__ import annotations

import copy

import pytest

import flashcore

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
if not hasattr(transformers, "AttentionInterface"):
    pytest.skip("transformers has no AttentionInterface (needs >= 4.53)", allow_module_level=True)

import flashcore.hf as fc_hf  # noqa: E402


def _cuda_ok() -> bool:
    return torch.cuda.is_available() and flashcore.built_with_cuda()


CASES = [
    pytest.param("cpu", torch.float32, id="cpu-float32"),
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                 marks=pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device or CPU-only build")),
]

# Prompt lengths of the left-padded batch; 70 > one 64-row tile.
LENGTHS = [70, 33, 51, 8]
PAD, VOCAB = 0, 1000


def _tol(dtype, scale):
    """Logit tolerance: bfloat16 rounding (8 mantissa bits) through 4 layers
    on both sides, relative to the logits' magnitude; tight for float32."""
    return (3e-2 if dtype == torch.bfloat16 else 1e-4) * max(1.0, scale)


_MODELS: dict = {}


def _models(device, dtype):
    """(sdpa model, fcore model) with identical random weights."""
    key = (device, dtype)
    if key not in _MODELS:
        name = fc_hf.register()
        cfg = transformers.LlamaConfig(
            hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=2,  # head_dim 64, GQA 4:1
            vocab_size=VOCAB, max_position_embeddings=512,
            pad_token_id=PAD, bos_token_id=1, eos_token_id=None)  # no early stop
        torch.manual_seed(0)
        ref = transformers.LlamaForCausalLM._from_config(
            copy.deepcopy(cfg), attn_implementation="sdpa").to(device=device, dtype=dtype).eval()
        fc = transformers.LlamaForCausalLM._from_config(
            copy.deepcopy(cfg), attn_implementation=name).to(device=device, dtype=dtype).eval()
        fc.load_state_dict(ref.state_dict())
        assert ref.config._attn_implementation == "sdpa"
        assert fc.config._attn_implementation == name
        _MODELS[key] = (ref, fc)
    return _MODELS[key]


def _batch(device, left=True):
    g = torch.Generator().manual_seed(1)
    s = max(LENGTHS)
    ids = torch.full((len(LENGTHS), s), PAD, dtype=torch.long)
    mask = torch.zeros((len(LENGTHS), s), dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        toks = torch.randint(3, VOCAB, (n,), generator=g)
        sl = slice(s - n, s) if left else slice(0, n)
        ids[b, sl], mask[b, sl] = toks, 1
    return ids.to(device), mask.to(device)


@pytest.fixture
def spy(monkeypatch):
    """Records what reaches flashcore: the mask plans and the k/v head counts."""
    seen = {"plans": [], "kv_heads": set(), "calls": 0}
    real_plan, real_fwd = fc_hf._plan, fc_hf.attention_forward

    def plan(*a, **kw):
        p = real_plan(*a, **kw)
        seen["plans"].append(p)
        return p

    def fwd(module, query, key, value, *a, **kw):
        seen["calls"] += 1
        seen["kv_heads"].add((query.shape[1], key.shape[1]))
        return real_fwd(module, query, key, value, *a, **kw)

    monkeypatch.setattr(fc_hf, "_plan", plan)
    monkeypatch.setattr(fc_hf, "attention_forward", fwd)
    fc_hf.register()  # AttentionInterface holds the function itself
    yield seen
    transformers.AttentionInterface.register(fc_hf.NAME, real_fwd)


# ------------------------------------------------------------------ logits
@pytest.mark.parametrize("device,dtype", CASES)
@pytest.mark.parametrize("padding", ["left", "right", "none"])
def test_logits_match_sdpa(device, dtype, padding, spy):
    ref, fc = _models(device, dtype)
    ids, mask = _batch(device, left=padding != "right")
    kw = dict(input_ids=ids) if padding == "none" else dict(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        a = ref(**kw).logits.float()
        b = fc(**kw).logits.float()
    keep = torch.ones_like(mask, dtype=torch.bool) if padding == "none" else mask.bool()
    a, b = a[keep], b[keep]
    scale = float(a.abs().max())
    err = float((a - b).abs().max())
    print(f"\n{device} {dtype} {padding}: max {err:.4g} mean {float((a - b).abs().mean()):.3g} tol {_tol(dtype, scale):.3g}")
    assert err <= _tol(dtype, scale), f"max |logits diff| {err} (logits up to {scale})"
    assert float((a - b).abs().mean()) <= _tol(dtype, scale) / 10
    assert spy["calls"] == 4 and spy["kv_heads"] == {(8, 2)}  # GQA went in unrepeated
    if padding == "none":
        assert spy["plans"] == []  # no mask: the plain op, no host sync
    else:
        assert len(spy["plans"]) == 1  # analysed once, shared by the 4 layers
        if padding == "left":
            s = max(LENGTHS)
            assert spy["plans"][0] == [(s - n, s, s - n, s) for n in LENGTHS]
        else:
            assert spy["plans"][0] == [(0, n, 0, n) for n in LENGTHS]


# ------------------------------------------------------------------ generate
def _greedy_consistent(ref, ids, mask, seqs, tol_fn):
    """Each generated token of `seqs` must be an argmax of the reference
    model's logits given the same prefix (teacher forcing, no cache), up to
    `tol` (bfloat16 logits tie often: exact ties are common with random
    weights, so a tie may break either way)."""
    s = ids.shape[1]
    full_mask = torch.cat([mask, torch.ones_like(seqs[:, s:])], dim=1)
    with torch.no_grad():
        logits = ref(input_ids=seqs, attention_mask=full_mask).logits.float()
    pred = logits[:, s - 1:-1]                                  # predicts seqs[:, s:]
    chosen = pred.gather(-1, seqs[:, s:, None])[..., 0]
    best = pred.max(-1).values
    gap = best - chosen
    tol = tol_fn(float(pred.abs().max()))
    assert float(gap.max()) <= tol, (
        f"generated tokens are not greedy for the reference model: worst logit gap {float(gap.max())}")


def _generate(model, ids, mask, **kw):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, min_new_tokens=16,
                              do_sample=False, cache_implementation="static",
                              pad_token_id=PAD, **kw)


@pytest.mark.parametrize("device,dtype", CASES)
def test_generate_static_cache_same_greedy_tokens(device, dtype, spy):
    ref, fc = _models(device, dtype)
    ids, mask = _batch(device, left=True)
    kw = dict(disable_compile=True)  # eager decoding: the auto-compiled one is tested below
    a = _generate(ref, ids, mask, **kw)
    b = _generate(fc, ids, mask, **kw)
    assert a.shape == b.shape == (len(LENGTHS), max(LENGTHS) + 16)
    # The static cache gives flashcore keys [0, max_cache_len) with unfilled
    # slots; prefill and every decode step went through the mask analysis.
    assert len(spy["plans"]) >= 16
    assert any(len(set(p)) > 1 for p in spy["plans"])  # per-row (left-padded) ranges
    if dtype == torch.float32:
        assert torch.equal(a, b)
    else:
        same = sum(bool(torch.equal(x, y)) for x, y in zip(a, b))
        print(f"bfloat16: {same}/{len(LENGTHS)} rows token-identical to sdpa")
        _greedy_consistent(ref, ids, mask, b, lambda sc: _tol(dtype, sc))
        _greedy_consistent(ref, ids, mask, a, lambda sc: _tol(dtype, sc))


@pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device or CPU-only build")
def test_generate_static_cache_auto_compiled():
    # generate() compiles the decoding step by itself for a static cache on
    # CUDA (mode "reduce-overhead": CUDA graphs); the masked path runs
    # outside the graphs (torch.compiler.disable).
    device, dtype = "cuda", torch.bfloat16
    ref, fc = _models(device, dtype)
    ids, mask = _batch(device, left=True)
    torch._dynamo.reset()
    b = _generate(fc, ids, mask)
    eager = _generate(fc, ids, mask, disable_compile=True)
    same = sum(bool(torch.equal(x, y)) for x, y in zip(b, eager))
    print(f"compiled vs eager flashcore: {same}/{len(LENGTHS)} rows token-identical")
    _greedy_consistent(ref, ids, mask, b, lambda sc: _tol(dtype, sc))


# ------------------------------------------------------------------ masks
class _Module:
    is_causal = True


def _call(mask, sq=6, sk=6, **kw):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, sq, 64, generator=g)
    k = torch.randn(2, 2, sk, 64, generator=g)
    return fc_hf.attention_forward(_Module(), q, k, k, mask, **kw)


def _causal_padded(starts, sq=6, sk=6):
    j = torch.arange(sk)
    pos = torch.arange(sq) + (sk - sq)
    m = (j[None, :] <= pos[:, None])[None] & (j[None, None, :] >= torch.tensor(starts)[:, None, None])
    return m[:, None]  # (B, 1, Sq, Sk)


def test_mask_formats_agree():
    m = _causal_padded([0, 2])
    out_bool, _ = _call(m)
    add = torch.zeros(m.shape).masked_fill(~m, torch.finfo(torch.float32).min)
    out_add, _ = _call(add)
    assert torch.equal(out_bool, out_add)
    assert out_bool.shape == (2, 6, 4, 64)  # (B, Sq, H, D)
    assert not out_bool[1, :2].any()  # query rows in the left padding: zeros
    # the unpadded row equals a plain causal call
    assert torch.equal(out_bool[0], _call(None)[0][0])


@pytest.mark.parametrize("name,make", [
    ("bidirectional", lambda: torch.ones(2, 1, 6, 6, dtype=torch.bool)),
    ("hole", lambda: _causal_padded([0, 0]).index_put_((torch.tensor(0), torch.tensor(0),
                                                       torch.tensor(4), torch.tensor(2)),
                                                      torch.tensor(False))),
    ("per-head", lambda: torch.cat([_causal_padded([0, 0]), _causal_padded([0, 1])], dim=1)),
    ("bias", lambda: torch.full((2, 1, 6, 6), -0.5)),
    ("shape", lambda: _causal_padded([0, 0])[..., :5]),
])
def test_unsupported_masks_raise(name, make):
    with pytest.raises(ValueError, match="flashcore attention supports only causal"):
        _call(make())


def test_register_rejects_flash_names():
    with pytest.raises(ValueError, match="contain"):
        fc_hf.register("flashcore")
    assert fc_hf.register() == "fcore"
    assert "fcore" in transformers.AttentionInterface()
