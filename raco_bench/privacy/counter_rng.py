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
replaces the words: the words of stream (id, step, purpose) are the ChaCha20 keystream (RFC 8439) under a
secret 256-bit key from the operating system, with the 96-bit nonce ``step·2⁸ + purpose ‖ key(id, step, purpose)``
and the 32-bit block counter j (:func:`secret_words`). The nonce and counter are injective in (id, step, purpose,
block index), so no two streams share a block, and without the key the words are indistinguishable from random
(ChaCha20 as a pseudorandom function): the ε a run claims then holds against anyone who reads its logs, seed
included (docs/privacy.md, "Threat model"). ChaCha20 is additions, rotations and exclusive ors of 32-bit words, with
no table and no branch that depends on the key: the same words come from a compiled loop on a CPU
(:func:`_chacha20_blocks`) and from torch integer operations on any other device (:func:`chacha20_blocks`), where a
pack's step draws them without leaving the device (docs/packs.md, "The GPU path").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from raco_bench.jit import kernel

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
KEY_BYTES = 32  # ChaCha20's 256-bit key
_MAX_STEP = 1 << 23  # the nonce's step field (steps above this are refused)
_MAX_BLOCK = 1 << 32  # 64-byte blocks per stream (ChaCha20's 32-bit block counter: 2³⁵ words)
WORDS_PER_BLOCK = 8  # 64-bit words in one ChaCha20 block


@dataclass(frozen=True, eq=False)
class Keystream:
    """Where the words of every stream come from: SplitMix64 of the stream key (``reproducible``: anyone who
    knows the seed and the settings regenerates every draw) or the ChaCha20 keystream under a secret key (``secret``).

    The key is never printed, logged or pickled into a result: ``repr`` hides it, and a trial receives it
    through Ray's object store (docs/privacy.md, "Threat model"). ``cpu_loop``: secret words of CPU tensors come from
    the compiled loop (False: from the torch form every other device runs, the same bits; tests count a GPU's
    operations on a CPU with it)."""

    secret: bytes | None = field(default=None, repr=False)
    cpu_loop: bool = True

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
        return secret_words(self.secret, keys, start, count, self.cipher(keys.device), self.cpu_loop)

    def cipher(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The key as ChaCha20's eight little-endian 32-bit key words (int64) on ``device``, kept per device so that a
        step on a GPU never copies it there again. Like the key, it is not pickled: a copy of the word source (a Ray
        trial's) builds its own."""
        device = torch.device(device)
        cache = self.__dict__.setdefault("_key_words", {})
        if device not in cache:
            cache[device] = torch.from_numpy(np.frombuffer(self.secret, dtype="<u4").astype(np.int64)).to(device)
        return cache[device]

    def __getstate__(self) -> dict:
        return {"secret": self.secret, "cpu_loop": self.cpu_loop}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "secret", state["secret"])
        object.__setattr__(self, "cpu_loop", state.get("cpu_loop", True))


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
    (step, purpose) tag that completes its ChaCha20 nonce (``tag >> 32``), plus the word source."""

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


def stream_keys(seeds: torch.Tensor, step: torch.Tensor | int, purpose: int, source: Keystream = REPRODUCIBLE,
                checked: bool = True) -> StreamKeys:
    """The key of each configuration's stream for ``purpose`` at ``step`` (shape of ``seeds``), in ``source``.

    A step given as a Python integer enters the device's arithmetic as a scalar: nothing is copied to the device, so a
    pack's step on a GPU never waits for it (docs/packs.md, "The GPU path"). ``checked=False`` skips the check of step
    tensors against the secret nonce's field, for a caller that checked its whole range on the host
    (:func:`check_steps`): on a GPU that check reads the steps back."""
    if not 0 <= purpose < 256:
        raise ValueError(f"purpose {purpose} is outside the nonce's 8-bit purpose field")
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    if isinstance(step, int):
        check_steps(step, source)
        key = mix(mix(seeds ^ _SEED_SALT) + _signed(_mix_int((step * _STEP_MULT + purpose) & _MASK64)))
        return StreamKeys(key, torch.full_like(key, step * (1 << 40) + purpose * (1 << 32)), source)
    step = torch.as_tensor(step, dtype=torch.int64, device=seeds.device)
    key = mix(mix(seeds ^ _SEED_SALT) + mix(step * _STEP_MULT + purpose))
    if checked and source.secret is not None and bool((step >= _MAX_STEP).any() | (step < 0).any()):
        raise ValueError(f"step {step.max().item()} is outside the secret generator's counter range [0, {_MAX_STEP})")
    tag = torch.broadcast_to(step * (1 << 40) + purpose * (1 << 32), key.shape).clone()  # materialised whatever the shapes (one copy)
    return StreamKeys(key, tag, source)


_MASK64 = (1 << 64) - 1


def _mix_int(x: int) -> int:
    """:func:`mix` of one unsigned 64-bit Python integer."""
    x = ((x ^ (x >> 30)) * (_M1 & _MASK64)) & _MASK64
    x = ((x ^ (x >> 27)) * (_M2 & _MASK64)) & _MASK64
    return x ^ (x >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def check_steps(last_step: int, source: Keystream) -> None:
    """Refuse steps 0 … ``last_step`` where ``source`` cannot address them (the secret nonce's step field)."""
    if source.secret is not None and not 0 <= last_step < _MAX_STEP:
        raise ValueError(f"step {last_step} is outside the secret generator's counter range [0, {_MAX_STEP})")


def secret_words(secret: bytes, keys: StreamKeys, start: int, count: int, key_words: torch.Tensor | None = None,
                 cpu_loop: bool = True) -> torch.Tensor:
    """Words ``start … start+count−1`` of each stream's ChaCha20 keystream (RFC 8439), as int64, on the keys' device.

    Stream (id, step, purpose) is ChaCha20 under the secret key with the nonce ``tag >> 32 ‖ key`` (the 32-bit word
    step·2⁸ + purpose, then the 64-bit stream key, little-endian) and block counter j from 0: word w is bytes 8w … 8w + 7
    of that keystream, read as a little-endian 64-bit integer (block w // 8). On a CPU the blocks come from one compiled
    loop (:func:`_chacha20_blocks`), elsewhere from torch integer operations on the device (:func:`chacha20_blocks`);
    both are the same bits (``cpu_loop=False`` takes the torch form on a CPU too). ``key_words``: the key as
    :meth:`Keystream.cipher` gives it (built here when None)."""
    if count <= 0:
        return torch.zeros(*keys.shape, 0, dtype=torch.int64, device=keys.device)
    first, last = start // WORDS_PER_BLOCK, (start + count - 1) // WORDS_PER_BLOCK
    if last >= _MAX_BLOCK:
        raise ValueError(f"a stream of the secret generator holds at most {WORDS_PER_BLOCK * _MAX_BLOCK} words")
    shape, n_blocks, offset = keys.shape, last - first + 1, start - WORDS_PER_BLOCK * first
    key = keys.key.reshape(-1)
    nonce = _shift_right(keys.tag.reshape(-1), 32)
    if key_words is None:
        key_words = torch.from_numpy(np.frombuffer(secret, dtype="<u4").astype(np.int64)).to(keys.device)
    if keys.device.type == "cpu" and cpu_loop:
        blocks = np.empty((key.shape[0], n_blocks, 16), dtype=np.uint32)
        _chacha20_blocks(key_words.numpy().astype(np.uint32), nonce.numpy().astype(np.uint32), key.numpy().view(np.uint64), first, blocks)
        out = torch.from_numpy(blocks.view("<i8").reshape(key.shape[0], -1))
    else:
        out = chacha20_blocks(key_words, nonce, key, first, n_blocks)
    return out[:, offset : offset + count].reshape(*shape, count)


_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"
_M32 = 0xFFFFFFFF
_ROTATIONS = (16, 12, 8, 7)


def chacha20_blocks(key_words: torch.Tensor, nonce: torch.Tensor, key: torch.Tensor, first: int, n_blocks: int) -> torch.Tensor:
    """ChaCha20 blocks ``first … first + n_blocks − 1`` of S streams in torch integer operations (any device): key_words
    (8, the secret key), nonce (S: the nonce's first 32-bit word) and key (S: the 64-bit stream key, the nonce's last
    two words), int64. Returns S × 8·n_blocks little-endian 64-bit words (int64).

    32-bit words are held in int64 and reduced modulo 2³² after each addition and rotation. The 16 state words are four
    rows of four (the RFC's a, b, c and d), so a column round is four lines of whole-row operations; the diagonal round
    is the same four lines after rotating rows b, c and d by one, two and three places. About 650 operations whatever
    S and the number of blocks."""
    S, dev = key.shape[0], key.device
    state = torch.empty(16, S, n_blocks, dtype=torch.int64, device=dev)
    for i, word in enumerate(_SIGMA):  # scalars: nothing is copied to the device
        state[i] = word
    state[4:12] = key_words[:, None, None]
    state[12] = torch.arange(first, first + n_blocks, dtype=torch.int64, device=dev)
    state[13] = nonce[:, None]
    state[14] = (key & _M32)[:, None]
    state[15] = _shift_right(key, 32)[:, None]
    a, b, c, d = (state[i : i + 4].clone() for i in range(0, 16, 4))
    for double in range(20):
        for x, y, z, r in ((a, b, d, 0), (c, d, b, 1), (a, b, d, 2), (c, d, b, 3)):  # x += y; z ^= x; z <<<= r
            x.add_(y).bitwise_and_(_M32)
            z.bitwise_xor_(x)
            high = z >> (32 - _ROTATIONS[r])
            z.bitwise_left_shift_(_ROTATIONS[r]).bitwise_and_(_M32).bitwise_or_(high)
        shift = -1 if double % 2 == 0 else 1  # into the diagonal round, then back
        b, c, d = b.roll(shift, 0), c.roll(2 * shift, 0), d.roll(3 * shift, 0)
    out = (torch.cat([a, b, c, d]) + state) & _M32  # 16 × S × n_blocks
    words = out[0::2] | (out[1::2] << 32)  # 8 × S × n_blocks: bytes 8w … 8w + 7 little-endian
    return words.permute(1, 2, 0).reshape(S, WORDS_PER_BLOCK * n_blocks)


@kernel
def _chacha20_blocks(key_words, nonce, key, first, out):
    """:func:`chacha20_blocks` as one loop on a CPU: key_words (8), nonce (S) uint32, key (S) uint64, out S × n_blocks ×
    16 uint32 (the blocks' bytes, little-endian). Blocks go through the rounds 64 at a time, word by word in arrays of
    64 lanes, so that each line of a quarter round is one vector loop."""
    S, n_blocks = out.shape[0], out.shape[1]
    lanes = 64
    total = S * n_blocks
    x = np.empty((16, lanes), np.uint32)
    init = np.empty((16, lanes), np.uint32)
    for base in range(0, total, lanes):
        width = min(lanes, total - base)
        for j in range(lanes):
            n = base + min(j, width - 1)
            s, blk = n // n_blocks, n % n_blocks
            init[0, j], init[1, j], init[2, j], init[3, j] = 0x61707865, 0x3320646E, 0x79622D32, 0x6B206574
            for i in range(8):
                init[4 + i, j] = key_words[i]
            init[12, j] = np.uint32(first + blk)
            init[13, j] = nonce[s]
            init[14, j] = np.uint32(key[s] & np.uint64(0xFFFFFFFF))
            init[15, j] = np.uint32(key[s] >> np.uint64(32))
        x[:, :] = init
        for _ in range(10):
            for q in range(8):
                if q < 4:
                    ia, ib, ic, id_ = q, 4 + q, 8 + q, 12 + q
                else:
                    ia, ib, ic, id_ = q - 4, 4 + (q - 3) % 4, 8 + (q - 2) % 4, 12 + (q - 1) % 4
                xa, xb, xc, xd = x[ia], x[ib], x[ic], x[id_]
                for j in range(lanes):
                    va = np.uint32(xa[j] + xb[j])
                    t = xd[j] ^ va
                    vd = np.uint32((t << np.uint32(16)) | (t >> np.uint32(16)))
                    vc = np.uint32(xc[j] + vd)
                    t = xb[j] ^ vc
                    vb = np.uint32((t << np.uint32(12)) | (t >> np.uint32(20)))
                    va = np.uint32(va + vb)
                    t = vd ^ va
                    vd = np.uint32((t << np.uint32(8)) | (t >> np.uint32(24)))
                    vc = np.uint32(vc + vd)
                    t = vb ^ vc
                    vb = np.uint32((t << np.uint32(7)) | (t >> np.uint32(25)))
                    xa[j], xb[j], xc[j], xd[j] = va, vb, vc, vd
        for j in range(width):
            n = base + j
            s, blk = n // n_blocks, n % n_blocks
            for i in range(16):
                out[s, blk, i] = np.uint32(x[i, j] + init[i, j])


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
    m = poisson_width(n, n * qmax)  # n where q = 1
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
