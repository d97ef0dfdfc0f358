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
is a statistical, not a cryptographic, generator (docs/privacy.md, "Random numbers").
"""

from __future__ import annotations

import math

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


def stream_keys(seeds: torch.Tensor, step: torch.Tensor | int, purpose: int) -> torch.Tensor:
    """The key of each configuration's stream for ``purpose`` at ``step`` (int64, shape of ``seeds``)."""
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    step = torch.as_tensor(step, dtype=torch.int64, device=seeds.device)
    return mix(mix(seeds ^ _SEED_SALT) + mix(step * _STEP_MULT + purpose))


def words(keys: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """Words ``start … start+count−1`` of each key's stream: shape ``keys.shape + (count,)``."""
    i = torch.arange(start + 1, start + count + 1, dtype=torch.int64, device=keys.device)
    return mix(keys[..., None] + i * _GAMMA)


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
    m = int(n * qmax + 6.0 * math.sqrt(n * qmax + 1.0) + 16) if qmax < 1 else n
    m = min(m, n)
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


class Stream:
    """One configuration's random numbers: draws by (step, purpose) from the counter generator, seeded by the run seed.

    A run's step t (1-based) draws its batch, Gaussian and Laplace noise from the streams of (seed, t);
    initial parameters come from step 0. :mod:`raco_bench.packs` draws the same numbers for many
    seeds at once.
    """

    def __init__(self, seed: int, device: torch.device | str = "cpu") -> None:
        self.seed, self.device = int(seed), torch.device(device)
        self._seed = torch.tensor([self.seed], dtype=torch.int64, device=self.device)

    def key(self, step: int, purpose: int) -> torch.Tensor:
        return stream_keys(self._seed, step, purpose)

    def batch(self, step: int, n: int, q: float, purpose: int = BATCH) -> torch.Tensor:
        """Sorted row indices of the step's Poisson sample."""
        rows, valid = poisson_rows(self.key(step, purpose), n, torch.tensor([q], dtype=torch.float64, device=self.device))
        return rows[0][valid[0]]

    def uniform(self, step: int, count: int, purpose: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return uniform(self.key(step, purpose), count)[0].to(dtype)

    def normal(self, step: int, count: int, purpose: int = GAUSSIAN, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return normal(self.key(step, purpose), count)[0].to(dtype)

    def laplace(self, step: int, count: int, purpose: int = LAPLACE, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return laplace(self.key(step, purpose), count)[0].to(dtype)
