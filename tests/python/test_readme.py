"""The README's serving example runs as written (CPU reference, NumPy only)."""
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _section_code(title):
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, f"no python block under '## {title}'"
    return blocks[0]


def test_serving_example_runs_and_matches_plain_calls():
    ns = {}
    exec(compile(_section_code("Serving: variable-length batches and KV caches"), "README.md", "exec"), ns)
    import flashcore

    # Sequence 2 of the varlen batch is the plain causal call on its own rows.
    cu, q, k, v, out = ns["cu"], ns["q"], ns["k"], ns["v"], ns["out"]
    rows = slice(cu[2], cu[3])
    alone = flashcore.attention(q[None, rows], k[None, rows], v[None, rows], causal=True, layout="bshd")[0]
    assert np.array_equal(alone, out[rows])
    # The call wrote each new key/value at its sequence's old length (40 and
    # 7: page 2 row 8 and page 0 row 7); the example then advanced the lengths.
    table, k1, v1 = ns["block_table"], ns["k1"], ns["v1"]
    assert np.array_equal(ns["k_pool"][table[0, 2], 8], k1[0, 0])
    assert np.array_equal(ns["v_pool"][table[1, 0], 7], v1[1, 0])
    assert list(ns["cache_seqlens"]) == [41, 8]
    assert ns["out1"].shape == (2, 1, 8, 64) and np.isfinite(ns["out1"]).all()
