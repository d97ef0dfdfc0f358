"""Counter-based random numbers: every draw is a pure function of (seed, step, purpose, index).

A configuration's randomness (its Poisson batches, its Gaussian and Laplace noise, its initial
parameters) must be the same whether it trains alone or inside a pack of hundreds of configurations
(docs/packs.md). A stateful generator cannot give that once draws are batched across
configurations, so the suite derives every draw from a counter instead:

* a stream key ``key = mix(mix(seed ⊕ A) + mix(step · B + purpose))`` names the numbers one
  configuration needs for one purpose at one step (:func:`stream_keys`);
* the i-th 64-bit word of that stream is ``mix(key + (i + 1)·γ)`` with γ = 0x9E3779B97F4A7C15 and
  ``mix`` the SplitMix64 finaliser. This is exactly SplitMix64's output sequence started at
  ``key`` (a generator that passes BigCrush); any slice of it can be computed for many keys at once,
  on any device, with the same bits.

From the words: uniforms on (0, 1] with 53 random bits (``(w >>> 11) + 1) · 2⁻⁵³``), exponentials
``−log U``, Laplace as the difference of two exponentials, Gaussians by Box–Muller in float64, and
Poisson subsamples from Geometric gaps (:func:`poisson_rows`): in a sequence of independent
Bernoulli(q) trials the gaps between successes are iid Geometric(q) on {1, 2, …}, so
G = ⌊log U / log(1 − q)⌋ + 1 gives exactly the distribution of Poisson sampling while drawing about
q·n numbers instead of n. Batches are never truncated or padded (docs/methods/raco-dp.md, D14), and
everything downstream divides by the expected batch size q·n (D3). Like torch's own generators this
is a statistical generator: it is the ``reproducible`` word source.

The ``secret`` word source (:class:`Keystream` with a key) keeps the same counter addressing and
replaces the words: the words of stream (id, step, purpose) are the AES-256-CTR keystream under a
secret key from the operating system, with the 128-bit counter block
``key(id, step, purpose) ‖ step·2⁴⁰ + purpose·2³² + block`` (:func:`secret_words`). The block is
injective in (id, step, purpose, block index), so no two streams share a counter, and without the key
the words are indistinguishable from random (AES as a pseudorandom permutation): the ε a run claims
then holds against anyone who reads its logs, seed included (docs/privacy.md, "Threat model").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

# purposes: one stream per (seed, step, purpose)
INIT, BATCH, GAUSSIAN, LAPLACE, HISTOGRAM_BATCH = 0, 1, 2, 3, 4

_GAMMA = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed 64-bit integer
_M1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_M2 = -7723592293110705685  # 0x94D049BB133111EB
_SEED_SALT = 0x5EED5A17C0FFEE
_STEP_MULT = 0x2545F4914F6CDD1D
_TWO_POW_53 = 2.0**-53


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 words (torch's ``>>`` on int64 is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """The SplitMix64 finaliser on int64 words (multiplication wraps modulo 2⁶⁴)."""
    x = (x ^ _shift_right(x, 30)) * _M1
    x = (x ^ _shift_right(x, 27)) * _M2
    return x ^ _shift_right(x, 31)


RANDOMNESS_MODES = ("secret", "reproducible")
KEY_BYTES = 32  # AES-256
_MAX_STEP = 1 << 23  # the counter block's step field (steps above this are refused)
_MAX_BLOCK = 1 << 32  # 128-bit blocks per stream (2³³ words)


@dataclass(frozen=True, eq=False)
class Keystream:
    """Where the words of every stream come from: SplitMix64 of the stream key (``reproducible``: anyone who
    knows the seed and the settings regenerates every draw) or AES-256-CTR under a secret key (``secret``).

    The key is never printed, logged or pickled into a result: ``repr`` hides it, and a trial receives it
    through Ray's object store (docs/privacy.md, "Threat model")."""

    secret: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.secret is not None and len(self.secret) != KEY_BYTES:
            raise ValueError(f"a secret key has {KEY_BYTES} bytes, got {len(self.secret)}")

    @property
    def mode(self) -> str:
        return "reproducible" if self.secret is None else "secret"

    @staticmethod
    def fresh() -> "Keystream":
        """A new secret key from the operating system's generator (``os.urandom``)."""
        return Keystream(os.urandom(KEY_BYTES))

    @staticmethod
    def for_mode(mode: str, key_file: str | Path | None = None) -> "Keystream":
        """The word source of a run or sweep in ``mode``: reproducible, or secret with a fresh key (or the key
        kept in ``key_file``, created there when absent)."""
        if mode not in RANDOMNESS_MODES:
            raise ValueError(f"invalid randomness={mode!r}: choose one of {RANDOMNESS_MODES}")
        if mode == "reproducible":
            if key_file is not None:
                raise ValueError("--key-file holds a secret key: it applies only to --randomness secret")
            return REPRODUCIBLE
        return Keystream(load_or_create_key(Path(key_file))) if key_file is not None else Keystream.fresh()

    def words(self, keys: "StreamKeys", start: int, count: int) -> torch.Tensor:
        if self.secret is None:
            i = torch.arange(start + 1, start + count + 1, dtype=torch.int64, device=keys.device)
            return mix(keys.key[..., None] + i * _GAMMA)
        return secret_words(self.secret, keys, start, count, self.cipher())

    def cipher(self):
        """AES-256 under the secret key, built once per word source (building it costs as much as a step's draws). It is
        not pickled: a copy of the word source (a Ray trial's) builds its own."""
        cipher = self.__dict__.get("_cipher")
        if cipher is None:
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

            cipher = Cipher(algorithms.AES(self.secret), modes.ECB())
            object.__setattr__(self, "_cipher", cipher)
        return cipher

    def __getstate__(self) -> dict:
        return {"secret": self.secret}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "secret", state["secret"])


REPRODUCIBLE = Keystream()


def load_or_create_key(path: Path) -> bytes:
    """The secret key kept in ``path`` (hex), created with mode 0600 when the file does not exist. The key file is
    the user's to keep: it must never sit in a tracking store or a results folder."""
    if path.exists():
        text = path.read_text().strip()
        try:
            key = bytes.fromhex(text)
        except ValueError:
            key = b""
        if len(key) != KEY_BYTES:
            raise ValueError(f"key file {path} does not hold a {KEY_BYTES}-byte key in hex; remove it to create a new one")
        return key
    if not path.parent.exists():
        raise ValueError(f"the directory of --key-file {path} does not exist; create it first")
    key = os.urandom(KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
    return key


@dataclass(frozen=True)
class StreamKeys:
    """The streams of many configurations for a (step, purpose) each: the 64-bit SplitMix64 key of each and the
    (step, purpose) tag that completes its AES counter block, plus the word source."""

    key: torch.Tensor  # int64
    tag: torch.Tensor  # int64: step·2⁴⁰ + purpose·2³²
    source: Keystream = REPRODUCIBLE

    @property
    def shape(self) -> torch.Size:
        return self.key.shape

    @property
    def device(self) -> torch.device:
        return self.key.device

    def __getitem__(self, index) -> "StreamKeys":
        return StreamKeys(self.key[index], self.tag[index], self.source)


def stream_keys(seeds: torch.Tensor, step: torch.Tensor | int, purpose: int, source: Keystream = REPRODUCIBLE) -> StreamKeys:
    """The key of each configuration's stream for ``purpose`` at ``step`` (shape of ``seeds``), in ``source``."""
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    step = torch.as_tensor(step, dtype=torch.int64, device=seeds.device)
    key = mix(mix(seeds ^ _SEED_SALT) + mix(step * _STEP_MULT + purpose))
    if not 0 <= purpose < 256:
        raise ValueError(f"purpose {purpose} is outside the counter block's 8-bit purpose field")
    if source.secret is not None and bool((step >= _MAX_STEP).any() | (step < 0).any()):
        raise ValueError(f"step {step.max().item()} is outside the secret generator's counter range [0, {_MAX_STEP})")
    tag = torch.broadcast_to(step * (1 << 40) + purpose * (1 << 32), key.shape)
    return StreamKeys(key, tag, source)


def secret_words(secret: bytes, keys: StreamKeys, start: int, count: int, cipher=None) -> torch.Tensor:
    """Words ``start … start+count−1`` of each stream's AES-256-CTR keystream (one OpenSSL call for every stream).

    Block j of a stream is AES_k(hi ‖ lo) with hi = the stream key and lo = tag + j (both big-endian, so this is
    exactly CTR mode started at hi ‖ tag); its 16 bytes are two little-endian 64-bit words."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    if count <= 0:
        return torch.zeros(*keys.shape, 0, dtype=torch.int64, device=keys.device)
    first, last = start // 2, (start + count - 1) // 2
    n_blocks = last - first + 1
    if last >= _MAX_BLOCK:
        raise ValueError(f"a stream of the secret generator holds at most {2 * _MAX_BLOCK} words")
    shape = keys.shape
    hi = keys.key.reshape(-1).cpu().numpy().view(np.uint64)
    lo = keys.tag.reshape(-1).cpu().numpy().view(np.uint64)
    blocks = np.empty((hi.shape[0], n_blocks, 2), dtype=np.uint64)
    blocks[:, :, 0] = hi[:, None]
    blocks[:, :, 1] = lo[:, None] + np.arange(first, last + 1, dtype=np.uint64)[None, :]
    blocks.byteswap(inplace=True)
    stream = np.empty(blocks.nbytes + 15, dtype=np.uint8)  # update_into wants room for one more block
    cipher = cipher or Cipher(algorithms.AES(secret), modes.ECB())
    cipher.encryptor().update_into(blocks.tobytes(), stream)  # ECB of counter blocks = CTR keystream
    out = stream[: blocks.nbytes].view("<i8").reshape(hi.shape[0], 2 * n_blocks)[:, start - 2 * first : start - 2 * first + count]
    return torch.from_numpy(np.ascontiguousarray(out)).to(keys.device).reshape(*shape, count)


def words(keys: StreamKeys, start: int, count: int) -> torch.Tensor:
    """Words ``start … start+count−1`` of each key's stream: shape ``keys.shape + (count,)``."""
    return keys.source.words(keys, start, count)


def uniform(keys: torch.Tensor, count: int, start: int = 0) -> torch.Tensor:
    """Uniforms on (0, 1] (float64, 53 random bits)."""
    return (_shift_right(words(keys, start, count), 11) + 1).to(torch.float64) * _TWO_POW_53


def exponential(keys: torch.Tensor, count: int, start: int = 0) -> torch.Tensor:
    """Exp(1) draws, −log U with U on (0, 1] (finite: at most 53·log 2)."""
    return -torch.log(uniform(keys, count, start))


def laplace(keys: torch.Tensor, count: int) -> torch.Tensor:
    """Unit Laplace draws (scale 1) as E₁ − E₂ (words 0…count−1 and count…2count−1)."""
    e = exponential(keys, 2 * count)
    return e[..., :count] - e[..., count:]


def normal(keys: torch.Tensor, count: int) -> torch.Tensor:
    """Standard normal draws by Box–Muller in float64 (pair j uses words 2j and 2j+1)."""
    pairs = (count + 1) // 2
    u = uniform(keys, 2 * pairs).view(*keys.shape, pairs, 2)
    radius = torch.sqrt(-2.0 * torch.log(u[..., 0]))
    angle = (2.0 * math.pi) * u[..., 1]
    z = torch.stack((radius * torch.cos(angle), radius * torch.sin(angle)), dim=-1).reshape(*keys.shape, 2 * pairs)
    return z[..., :count]


def poisson_width(n: int, mean: float) -> int:
    """The uniforms :func:`poisson_rows` draws per key in one round for a batch of expected size ``mean`` on ``n`` rows
    (the mean + 6 sd + 16, at most n): the padded width of such a batch, before trimming."""
    return min(n, int(mean + 6.0 * math.sqrt(mean + 1.0) + 16))


def poisson_rows(keys: torch.Tensor, n: int, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Poisson subsample of ``range(n)`` at rate ``q[k]`` for every key: ``(rows, valid)``, both K × M.

    Row k's kept indices are ``rows[k][valid[k]]`` (increasing). The gaps between kept indices are iid
    Geometric(q): G = ⌊log U / log(1 − q)⌋ + 1 with the stream's j-th uniform for gap j, so the
    sample depends on the key and q only, not on M or on the other keys. Invalid slots hold ``n − 1``
    (a valid row to gather; their weight must be zero). q = 1 keeps every row.
    """
    q = torch.as_tensor(q, dtype=torch.float64, device=keys.device).expand(keys.shape)
    if bool((q <= 0).any()) or bool((q > 1).any()):
        raise ValueError(f"sampling rates must be in (0, 1], got {q.tolist()}")
    log1mq = torch.log1p(-q.clamp(max=1.0 - 1e-16))[:, None]
    full = (q == 1.0)[:, None]
    qmax = float(q.max())
    m = poisson_width(n, n * qmax) if qmax < 1 else n
    start, position = 0, torch.full((keys.shape[0], 1), -1, dtype=torch.int64, device=keys.device)
    chunks = []
    while True:
        u = uniform(keys, m, start)
        gaps = torch.where(full, torch.ones_like(u, dtype=torch.int64), torch.floor(torch.log(u) / log1mq).to(torch.int64) + 1)
        idx = position + torch.cumsum(gaps, 1)
        chunks.append(idx)
        position = idx[:, -1:]
        if bool((position >= n - 1).all()):
            break
        start += m
    rows = chunks[0] if len(chunks) == 1 else torch.cat(chunks, 1)
    valid = rows < n
    width = int(valid.sum(1).max()) if rows.numel() else 0
    rows, valid = rows[:, :width], valid[:, :width]
    return torch.where(valid, rows, torch.full_like(rows, n - 1)), valid


# more purposes
GROUP_COUNTS, SELECTION = 5, 6
# the seed papers' other methods: a second Gaussian per step (PF-LD's dual, DPSE's losses), a one-time stage-1
# release (DPSE), and the draw that realises a randomised predictor's predictions (DP post-processing)
SECOND_GAUSSIAN, STAGE_ONE, PREDICTION = 7, 8, 9
# a private random search's own draws (accounted tuning, raco_bench/sweeps/accounted.py): its number of runs K (step 0)
# and its i-th configuration and keyed ids (step i + 1), in the stream of the search, under the sweep's word source
SEARCH = 10


class Stream:
    """One configuration's random numbers: draws by (step, purpose) from the counter generator, addressed by the run's
    stream id (:func:`raco_bench.training.config.stream_id`: its configuration and seed) in the run's word source.

    A run's step t (1-based) draws its batch, Gaussian and Laplace noise from the streams of (seed, t);
    initial parameters come from step 0. :mod:`raco_bench.packs` draws the same numbers for many
    seeds at once. ``batch_seed`` (default: ``seed``) addresses the stream of the gradient batches alone: runs that
    share it draw their Poisson batches from the same uniforms (docs/packs.md, "Shared batches").
    """

    def __init__(self, seed: int, device: torch.device | str = "cpu", source: Keystream = REPRODUCIBLE, batch_seed: int | None = None) -> None:
        self.seed, self.device, self.source = int(seed), torch.device(device), source
        self.batch_seed = self.seed if batch_seed is None else int(batch_seed)
        self._seed = torch.tensor([self.seed], dtype=torch.int64, device=self.device)
        self._batch_seed = torch.tensor([self.batch_seed], dtype=torch.int64, device=self.device)

    def key(self, step: int, purpose: int) -> StreamKeys:
        return stream_keys(self._batch_seed if purpose == BATCH else self._seed, step, purpose, self.source)

    def batch(self, step: int, n: int, q: float, purpose: int = BATCH) -> torch.Tensor:
        """Sorted row indices of the step's Poisson sample (the gradient batch, ``purpose`` BATCH, from the batch stream)."""
        rows, valid = poisson_rows(self.key(step, purpose), n, torch.tensor([q], dtype=torch.float64, device=self.device))
        return rows[0][valid[0]]

    def uniform(self, step: int, count: int, purpose: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return uniform(self.key(step, purpose), count)[0].to(dtype)

    def normal(self, step: int, count: int, purpose: int = GAUSSIAN, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return normal(self.key(step, purpose), count)[0].to(dtype)

    def laplace(self, step: int, count: int, purpose: int = LAPLACE, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return laplace(self.key(step, purpose), count)[0].to(dtype)
