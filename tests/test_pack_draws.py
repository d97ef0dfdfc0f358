"""Noise drawn ahead in blocks of steps is exactly the noise drawn step by step (raco_bench/packs/draws.py)."""

import pytest
import torch

from raco_bench.packs.draws import BLOCK_BYTES, BLOCK_STEPS, DrawAhead, block_steps
from raco_bench.privacy import counter_rng as rng


@pytest.mark.parametrize("source", [rng.REPRODUCIBLE, rng.Keystream(bytes(range(32)))], ids=["reproducible", "secret"])
@pytest.mark.parametrize("purpose,count,draw", [(rng.LAPLACE, 4, rng.laplace), (rng.GAUSSIAN, 7, rng.normal)], ids=["laplace", "gaussian"])
def test_blocks_equal_per_step_draws(source, purpose, count, draw):
    seeds = torch.tensor([3, 11, 12, 400], dtype=torch.int64)
    ahead = DrawAhead(seeds, purpose, count, draw, source, last_step=40)
    assert ahead.steps == BLOCK_STEPS
    # in order across block boundaries, then out of order (a white-box audit may ask any step), then past the last step
    for t in [*range(1, 41), 5, 17, 16, 40, 41, 2]:
        expected = draw(rng.stream_keys(seeds, t, purpose, source), count)
        assert torch.equal(ahead.at(t), expected), t
    assert ahead.block.shape[1] == 1 or ahead.first + ahead.block.shape[1] - 1 <= 40


def test_a_block_stops_at_the_last_step():
    ahead = DrawAhead(torch.arange(3), rng.LAPLACE, 2, rng.laplace, rng.REPRODUCIBLE, last_step=20)
    ahead.at(17)
    assert (ahead.first, ahead.block.shape[1]) == (17, 4)  # steps 17…20, none past the pack's longest T


def test_block_size_keeps_to_the_byte_budget():
    assert block_steps(4, 4) == BLOCK_STEPS
    k, count = 256, 206  # Adult's Gaussian draws in a pack of 256
    steps = block_steps(k, count)
    assert 1 <= steps < BLOCK_STEPS and 8 * k * count * steps <= BLOCK_BYTES < 8 * k * count * (steps + 1)
    assert block_steps(10**6, 10**6) == 1
