"""The counter-based generator: SplitMix64 bit for bit, the distributions it derives (tested statistically, at
fixed seeds, so each test is deterministic and a wrong scale or shape fails it), and the property packs rely on:
a configuration's draws do not depend on which other configurations are drawn with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from raco_bench.privacy import counter_rng as rng

MASK = (1 << 64) - 1


def _splitmix64(state: int, count: int) -> list[int]:
    """The reference SplitMix64 generator in Python integers."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(z ^ (z >> 31))
    return out


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def test_words_are_splitmix64_bit_for_bit():
    keys = rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 2**40]), rng.GAUSSIAN)
    got = rng.words(keys, 0, 50)
    for k, key in enumerate(keys.key.tolist()):
        assert got[k].tolist() == [_signed(w) for w in _splitmix64(key & MASK, 50)]
    assert torch.equal(rng.words(keys, 20, 30), got[:, 20:])  # any slice of a stream


def _keys(n: int = 4, purpose: int = rng.GAUSSIAN) -> torch.Tensor:
    return rng.stream_keys(torch.arange(n), 7, purpose)


def test_uniform_exponential_normal_and_laplace_have_their_distributions():
    keys = _keys(1)
    u = rng.uniform(keys, 200_000)[0].numpy()
    assert u.min() > 0 and u.max() <= 1 and stats.kstest(u, "uniform").pvalue > 1e-3
    z = rng.normal(keys, 200_001)[0].numpy()
    assert z.shape == (200_001,) and stats.kstest(z, "norm").pvalue > 1e-3
    lap = rng.laplace(keys, 200_000)[0].numpy()
    assert stats.kstest(lap, "laplace").pvalue > 1e-3
    e = rng.exponential(keys, 200_000)[0].numpy()
    assert stats.kstest(e, "expon").pvalue > 1e-3
    # power: the tests reject a wrong scale
    assert stats.kstest(1.1 * z, "norm").pvalue < 1e-6 and stats.kstest(1.1 * lap, "laplace").pvalue < 1e-6


def test_streams_of_different_seeds_steps_and_purposes_are_uncorrelated():
    a = rng.normal(rng.stream_keys(torch.tensor([1]), 5, rng.GAUSSIAN), 100_000)[0]
    others = [rng.normal(rng.stream_keys(torch.tensor([2]), 5, rng.GAUSSIAN), 100_000)[0],
              rng.normal(rng.stream_keys(torch.tensor([1]), 6, rng.GAUSSIAN), 100_000)[0],
              rng.normal(rng.stream_keys(torch.tensor([1]), 5, rng.LAPLACE), 100_000)[0]]
    for b in others:
        assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 4 / np.sqrt(100_000)


def test_a_configurations_draws_do_not_depend_on_the_pack():
    seeds = torch.tensor([3, 11, 5, 8])
    q = torch.tensor([0.01, 0.2, 0.05, 1.0], dtype=torch.float64)
    rows, valid = rng.poisson_rows(rng.stream_keys(seeds, 4, rng.BATCH), 5000, q)
    for k in range(4):
        alone, ok = rng.poisson_rows(rng.stream_keys(seeds[k : k + 1], 4, rng.BATCH), 5000, q[k : k + 1])
        assert torch.equal(rows[k][valid[k]], alone[0][ok[0]])
    assert torch.equal(rows[3][valid[3]], torch.arange(5000))  # q = 1 keeps every row
    z = rng.normal(rng.stream_keys(seeds, 4, rng.GAUSSIAN), 9)
    assert torch.equal(z[1], rng.normal(rng.stream_keys(seeds[1:2], 4, rng.GAUSSIAN), 9)[0])


def test_poisson_rows_is_an_exact_poisson_subsample():
    """Inclusion of every index with probability q independently: per-index frequencies, the batch-size law
    Binomial(n, q) and independence of neighbouring indices, over 4,000 draws (one stream key per draw)."""
    n, q, draws = 400, 0.05, 4000
    keys = rng.stream_keys(torch.arange(draws), 0, rng.BATCH)
    rows, valid = rng.poisson_rows(keys, n, torch.full((draws,), q, dtype=torch.float64))
    member = torch.zeros(draws, n, dtype=torch.bool)
    member[torch.arange(draws)[:, None].expand_as(rows)[valid], rows[valid]] = True
    freq = member.double().mean(0).numpy()
    chi2 = ((freq - q) ** 2 * draws / (q * (1 - q))).sum()
    assert stats.chi2.sf(chi2, n) > 1e-3  # per-index inclusion rates are q
    sizes = member.sum(1).numpy()
    assert abs(sizes.mean() - n * q) < 4 * np.sqrt(n * q * (1 - q) / draws)
    assert abs(sizes.var() / (n * q * (1 - q)) - 1) < 0.1
    both = (member[:, :-1] & member[:, 1:]).double().mean().item()
    assert abs(both - q * q) < 4 * np.sqrt(q * q / (draws * (n - 1)))
    with pytest.raises(ValueError, match=r"sampling rates must be in \(0, 1\]"):
        rng.poisson_rows(keys[:1], n, torch.tensor([0.0]))


# ----------------------------------------------------------------------------- the secret word source
KEY = bytes(range(32))


def test_secret_words_are_aes_256_ctr_bit_for_bit():
    """Each stream's words are the AES-256-CTR keystream of ``cryptography`` started at the stream's counter block
    (key ‖ tag), read as little-endian 64-bit words; any slice of a stream is the same slice of that keystream."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    source = rng.Keystream(KEY)
    keys = rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 5_000_000]), rng.GAUSSIAN, source)
    got = rng.words(keys, 0, 51)
    for k in range(4):
        iv = (int(keys.key[k]) & MASK).to_bytes(8, "big") + (int(keys.tag[k]) & MASK).to_bytes(8, "big")
        stream = Cipher(algorithms.AES(KEY), modes.CTR(iv)).encryptor().update(bytes(8 * 52))
        assert got[k].tolist() == np.frombuffer(stream, dtype="<i8")[:51].tolist()
    assert torch.equal(rng.words(keys, 7, 30), got[:, 7:37])  # any slice, from an odd word too
    assert not torch.equal(got, rng.words(rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 5_000_000]),
                                                          rng.GAUSSIAN), 0, 51))  # not the reproducible words
    assert not torch.equal(got, rng.words(rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 5_000_000]),
                                                          rng.GAUSSIAN, rng.Keystream(bytes(32))), 0, 51))  # another key, other words


def test_secret_counter_blocks_are_injective():
    """The tag holds (step, purpose), so streams whose 64-bit keys collide at different (step, purpose) still use distinct
    counter blocks; steps beyond the tag's field are refused rather than wrapped."""
    a = rng.stream_keys(torch.tensor([5]), 3, rng.BATCH, rng.Keystream(KEY))
    b = rng.stream_keys(torch.tensor([5]), 3, rng.LAPLACE, rng.Keystream(KEY))
    assert int(a.tag[0]) != int(b.tag[0])
    with pytest.raises(ValueError, match="counter range"):
        rng.stream_keys(torch.tensor([5]), 1 << 23, rng.BATCH, rng.Keystream(KEY))


def test_secret_draws_have_their_distributions_and_packs_still_equal_runs_alone():
    source = rng.Keystream(KEY)
    keys = rng.stream_keys(torch.arange(1), 7, rng.GAUSSIAN, source)
    z = rng.normal(keys, 200_001)[0].numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-3 and stats.kstest(1.05 * z, "norm").pvalue < 1e-6
    lap = rng.laplace(keys, 200_000)[0].numpy()
    assert stats.kstest(lap, "laplace").pvalue > 1e-3
    seeds = torch.tensor([3, 11, 5, 8])
    q = torch.tensor([0.01, 0.2, 0.05, 1.0], dtype=torch.float64)
    rows, valid = rng.poisson_rows(rng.stream_keys(seeds, 4, rng.BATCH, source), 5000, q)
    for k in range(4):
        alone, ok = rng.poisson_rows(rng.stream_keys(seeds[k : k + 1], 4, rng.BATCH, source), 5000, q[k : k + 1])
        assert torch.equal(rows[k][valid[k]], alone[0][ok[0]])
    assert abs(valid[1].sum().item() - 1000) < 4 * np.sqrt(5000 * 0.2 * 0.8)


def test_key_file_is_created_private_and_read_back(tmp_path):
    path = tmp_path / "sweep.key"
    first = rng.Keystream.for_mode("secret", path)
    assert (path.stat().st_mode & 0o777) == 0o600 and first.secret == rng.Keystream.for_mode("secret", path).secret
    assert first.secret.hex() not in repr(first) and str(first.secret) not in repr(first)  # the key never in a repr
    path.write_text("not a key")
    with pytest.raises(ValueError, match="does not hold a 32-byte key"):
        rng.Keystream.for_mode("secret", path)
    with pytest.raises(ValueError, match="applies only to --randomness secret"):
        rng.Keystream.for_mode("reproducible", path)
    assert rng.Keystream.for_mode("secret").secret != rng.Keystream.for_mode("secret").secret  # fresh keys from the OS
