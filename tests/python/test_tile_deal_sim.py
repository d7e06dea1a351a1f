"""tools/tile-deal-sim: the static-deal simulation src/sm90/tile_list_plan.h
and docs/kernels.md quote. Each deal hands every tile to exactly one CTA
(the loads add up to the work), and the figures quoted for the landed tile
list come out of it."""
import importlib.machinery
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim():
    loader = importlib.machinery.SourceFileLoader("tile_deal_sim", str(ROOT / "tools" / "tile-deal-sim"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_every_deal_hands_out_all_the_work(sim):
    seqs = [sim.causal_blocks(n) for n in (4096, 8192, 700, 129)]
    heads = 16
    work = sum(sim.cost(k) for x in seqs for k in x) * heads
    for paired in (False, True):
        for w in (sim.tile_list(seqs, heads, paired), sim.tile_list(seqs, heads, paired, flip=False),
                  sim.greedy_tail(seqs, heads, paired)):
            assert len(w) == sim.CTAS
            assert sum(w) == pytest.approx(work)
    assert sum(sim.ideal(seqs, heads)) == pytest.approx(work)
    # The launch's round robin also hands out its empty units (0.1 each).
    empty = sum(max(len(x) for x in seqs) - len(x) for x in seqs) * heads
    assert sum(sim.round_robin(seqs, heads)) == pytest.approx(work + 0.1 * empty)
    # KV-cache prefill: pairs of one sequence's blocks, no empty units.
    chunks = [sim.prefill_blocks(512, n) for n in (600, 5000, 9000)]
    assert sum(sim.round_robin(chunks, heads, True)) == pytest.approx(
        sum(sim.cost(k) for x in chunks for k in x) * heads)


def test_the_quoted_figures(sim):
    # tile_list_plan.h: sequences of 4096 and 8192 tokens at 16 heads.
    seqs = [sim.causal_blocks(n) for n in sim.lengths("ramp", 2, 8192)]
    mean = sum(sim.cost(k) for x in seqs for k in x) * 16 / sim.CTAS
    assert round(max(sim.round_robin(seqs, 16)) / mean, 2) == 1.70
    assert round(max(sim.tile_list(seqs, 16, True, flip=False)) / mean, 2) == 1.03
    assert max(sim.ideal(seqs, 16)) <= max(sim.greedy_tail(seqs, 16, True)) <= max(sim.tile_list(seqs, 16, True))
    # docs/kernels.md: the flipped list on time_shapes.py's vrB8S4096D128
    # batch, 1.149x the mean work unflipped, 1.019x with the landed (flipped) list.
    seqs = [sim.causal_blocks(n) for n in sim.lengths("random", 8, 4096)]
    mean = sum(sim.cost(k) for x in seqs for k in x) * 16 / sim.CTAS
    assert round(max(sim.tile_list(seqs, 16, True, flip=False)) / mean, 3) == 1.149
    assert round(max(sim.tile_list(seqs, 16, True)) / mean, 3) == 1.019
