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


def _chacha20_reference(keys: rng.StreamKeys, words: int) -> list[list[int]]:
    """Each stream's first ``words`` words from ``cryptography``'s ChaCha20 (OpenSSL's 16-byte nonce: the 32-bit
    block counter, then RFC 8439's 96-bit nonce, all little-endian)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    out = []
    for key, tag in zip(keys.key.reshape(-1).tolist(), keys.tag.reshape(-1).tolist()):
        nonce = (0).to_bytes(4, "little") + (tag >> 32).to_bytes(4, "little") + (key & MASK).to_bytes(8, "little")
        stream = Cipher(algorithms.ChaCha20(KEY, nonce), None).encryptor().update(bytes(8 * words))
        out.append(np.frombuffer(stream, dtype="<i8").tolist())
    return out


def test_chacha20_blocks_match_rfc_8439s_test_vector():
    """RFC 8439, 2.3.2: key 00 … 1f, nonce 00000009 0000004a 00000000, block counter 1; both forms of the block."""
    key_words = torch.from_numpy(np.frombuffer(KEY, dtype="<u4").astype(np.int64))
    nonce, stream_key = torch.tensor([0x09000000]), torch.tensor([0x4A000000])  # the nonce's words, little-endian
    expected = bytes.fromhex("10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
                             "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")
    assert rng.chacha20_blocks(key_words, nonce, stream_key, 1, 1).numpy().tobytes() == expected
    blocks = np.empty((1, 1, 16), np.uint32)
    rng._chacha20_blocks(key_words.numpy().astype(np.uint32), nonce.numpy().astype(np.uint32), stream_key.numpy().view(np.uint64), 1, blocks)
    assert blocks.tobytes() == expected


@pytest.mark.parametrize("cpu_loop", [True, False], ids=["cpu-loop", "torch-ops"])
def test_secret_words_are_chacha20_bit_for_bit(cpu_loop):
    """Each stream's words are the ChaCha20 keystream of ``cryptography`` under the stream's nonce (its (step, purpose)
    word and its 64-bit key), read as little-endian 64-bit words; any slice of a stream is the same slice of that
    keystream, in the compiled CPU loop and in the torch form a GPU runs (forced here on the CPU)."""
    source = rng.Keystream(KEY, cpu_loop=cpu_loop)
    keys = rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 5_000_000]), rng.GAUSSIAN, source)
    got = rng.words(keys, 0, 51)
    assert got.tolist() == [w[:51] for w in _chacha20_reference(keys, 51)]
    assert torch.equal(rng.words(keys, 7, 30), got[:, 7:37])  # any slice, from a word inside a block too
    assert torch.equal(rng.words(keys[1:3], 17, 3), got[1:3, 17:20])
    assert not torch.equal(got, rng.words(rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 5_000_000]),
                                                          rng.GAUSSIAN), 0, 51))  # not the reproducible words
    assert not torch.equal(got, rng.words(rng.stream_keys(torch.tensor([0, 1, 12345, -7]), torch.tensor([0, 3, 999, 5_000_000]),
                                                          rng.GAUSSIAN, rng.Keystream(bytes(32))), 0, 51))  # another key, other words


def test_the_compiled_loop_and_the_torch_form_draw_the_same_words():
    """Many streams and blocks at once (the loop works 64 blocks at a time, so the lanes' tail is exercised)."""
    keys = rng.stream_keys(torch.arange(37) * 7919 - 100, torch.arange(37) % 5 + 2, rng.BATCH, rng.Keystream(KEY))
    key_words = torch.from_numpy(np.frombuffer(KEY, dtype="<u4").astype(np.int64))
    torch_form = rng.chacha20_blocks(key_words, keys.tag >> 32, keys.key, 3, 5)
    assert torch.equal(rng.secret_words(KEY, keys, 24, 40), torch_form)
    assert torch.equal(rng.secret_words(KEY, keys, 24, 40, cpu_loop=False), torch_form)


def test_secret_counter_blocks_are_injective():
    """The tag holds (step, purpose), so streams whose 64-bit keys collide at different (step, purpose) still use distinct
    nonces; steps beyond the nonce's field are refused rather than wrapped."""
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


def test_a_step_given_as_an_integer_names_the_same_streams_as_a_step_tensor():
    """Packs on a GPU pass the step as a Python integer (a scalar in the device's arithmetic, nothing copied to it):
    the keys and tags, and so every word, are those of the step as a tensor, in both word sources."""
    seeds = torch.tensor([0, 1, 12345, -7, 2**62])
    for source in (rng.REPRODUCIBLE, rng.Keystream(KEY)):
        for step in (0, 1, 999, (1 << 23) - 1):
            a = rng.stream_keys(seeds, step, rng.LAPLACE, source)
            b = rng.stream_keys(seeds, torch.tensor(step), rng.LAPLACE, source)
            assert torch.equal(a.key, b.key) and torch.equal(a.tag, b.tag)
            assert torch.equal(rng.normal(a, 5), rng.normal(b, 5))
    with pytest.raises(ValueError, match="counter range"):
        rng.stream_keys(seeds, 1 << 23, rng.BATCH, rng.Keystream(KEY))
