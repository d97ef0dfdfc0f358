"""Noise drawn ahead in blocks of steps is exactly the noise drawn step by step (raco_bench/packs/draws.py)."""

import pytest
import torch

from raco_bench.packs.draws import BLOCK_BYTES, BLOCK_STEPS, BatchesAhead, DrawAhead, block_steps
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


@pytest.mark.parametrize("source", [rng.REPRODUCIBLE, rng.Keystream(bytes(range(32)))], ids=["reproducible", "secret"])
def test_batches_drawn_ahead_are_each_streams_batch_alone(source):
    """Every distinct (batch stream, q) gets, at every step, exactly the rows it draws alone at that step, whatever
    else the block holds (other rates widen the padding only); the sizes are the batches' own."""
    n, streams, rates = 500, torch.tensor([3, 3, 11, 7], dtype=torch.int64), torch.tensor([0.02, 0.3, 0.02, 1.0], dtype=torch.float64)
    ahead = BatchesAhead(streams, rates, n, source, last_step=30)
    assert 1 < ahead.steps <= BLOCK_STEPS
    for t in [*range(1, 31), 4, 29, 1, 31]:
        rows, valid, sizes = ahead.at(t)
        for d in range(4):
            alone, ok = rng.poisson_rows(rng.stream_keys(streams[d : d + 1], t, rng.BATCH, source), n, rates[d : d + 1])
            assert torch.equal(rows[d][valid[d]], alone[0][ok[0]]), (t, d)
            assert sizes[d] == int(ok[0].sum()) and bool(valid[d, : sizes[d]].all()) and not bool(valid[d, sizes[d] :].any())
            assert bool((rows[d][~valid[d]] == n - 1).all())
    assert sizes[3] == n  # q = 1 keeps every row


def test_batch_blocks_keep_to_the_byte_budget():
    """Rows and their uniforms held ahead stay within BLOCK_BYTES (16 bytes per uniform), at least one step."""
    n, width = 30_000, rng.poisson_width(30_000, 1024)
    for D in (25, 256):
        ahead = BatchesAhead(torch.arange(D), torch.full((D,), 1024 / 30_000, dtype=torch.float64), n, rng.REPRODUCIBLE, last_step=10**4)
        assert ahead.steps == block_steps(D, 2 * width) and (ahead.steps == 1 or 16 * D * width * ahead.steps <= BLOCK_BYTES)
    assert BatchesAhead(torch.arange(25), torch.full((25,), 0.03, dtype=torch.float64), n, rng.REPRODUCIBLE, 10**4).steps > 4


def test_a_smaller_live_set_takes_over_the_block_without_drawing_again():
    """When configurations finish, the live ones keep what was drawn ahead for them: the same numbers, no new call
    until the block is used up (a pack's live set changes up to once per distinct T)."""
    calls = []

    def counted(keys, count):
        calls.append(keys.shape)
        return rng.laplace(keys, count)

    seeds = torch.tensor([3, 11, 12, 400], dtype=torch.int64)
    ahead = DrawAhead(seeds, rng.LAPLACE, 4, counted, rng.REPRODUCIBLE, last_step=40)
    ahead.at(1)
    keep = torch.tensor([1, 3])
    smaller = ahead.restricted(keep)
    for t in range(2, BLOCK_STEPS + 1):
        assert torch.equal(smaller.at(t), rng.laplace(rng.stream_keys(seeds[keep], t, rng.LAPLACE), 4))
    assert len(calls) == 1
    assert torch.equal(smaller.at(BLOCK_STEPS + 1), rng.laplace(rng.stream_keys(seeds[keep], BLOCK_STEPS + 1, rng.LAPLACE), 4)) and len(calls) == 2

    n, streams, rates = 500, torch.tensor([3, 11, 7]), torch.tensor([0.02, 0.3, 0.05], dtype=torch.float64)
    batches = BatchesAhead(streams, rates, n, rng.REPRODUCIBLE, last_step=40)
    batches.at(1)
    kept = batches.restricted(torch.tensor([2, 0]))
    assert kept.rows is not None
    for t in range(2, batches.first + batches.rows.shape[1]):
        rows, valid, sizes = kept.at(t)
        assert kept.first == 1  # still the block drawn at step 1
        for i, d in enumerate([2, 0]):
            alone, ok = rng.poisson_rows(rng.stream_keys(streams[d : d + 1], t, rng.BATCH), n, rates[d : d + 1])
            assert torch.equal(rows[i][valid[i]], alone[0][ok[0]]) and sizes[i] == int(ok[0].sum())
