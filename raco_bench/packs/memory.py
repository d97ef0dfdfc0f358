"""How much memory a pack takes beyond its process and its dataset, before it is trained (docs/packs.md, "Memory").

A sweep picks its pack size from this model and the node's free memory, so that a default sweep never drives a node
into Ray's memory monitor (which kills workers at 95 % of the node's memory). The model adds five parts, each the
arrays the code holds at once at its peak; the byte counts per element are those of the code (float32 arrays,
int64 indices, float64 noise). Two numbers are not: a history entry's size (measured with ``tracemalloc`` over what
a pack's recorders hold), and a fixed working set, fitted to the peaks ``raco-bench bench memory`` measures (it
prints the model beside each measured peak).
"""

from __future__ import annotations

from dataclasses import dataclass

from raco_bench.packs.draws import block_steps
from raco_bench.privacy.counter_rng import poisson_width
from raco_bench.training.evaluation import eval_rows as chunk_rows

HISTORY_ENTRY_BYTES = 1_700  # one recorded evaluation of one configuration (Python dicts of every split's metrics): tracemalloc, docs/packs.md
EVAL_BYTES_PER_ROW = 24  # per row, class and model of one evaluation chunk: its logits and working arrays, counted from the code
WORKING_BYTES = 24 * 2**20  # what torch and the allocator keep once a pack has run a step and an evaluation, fitted to measured peaks
STEP_ARRAYS = 6  # per-slot arrays of a chunk alive at once (constants, logits, probabilities, residual, coefficients, mask)
FUSED_STEP_ARRAYS = 4  # with the compiled two-class passes (a CPU, at most two parts): the margin, τ·margin, p₀ and the residual
CHUNK_CPU, CHUNK_GPU = 2**26, 2**30  # raco_bench.packs.tensors.chunk_budget


@dataclass(frozen=True)
class PackMemory:
    """Bytes a pack of K configurations holds at its peak, by part."""

    tables: int  # the training split's per-row constants the pack builds (X itself is the dataset's), and the working set
    state: int  # parameters, multipliers, settings and the noise draws held ahead (raco_bench.packs.draws)
    step: int  # one chunk's per-slot arrays (counted beside the evaluation's: measured, a pack's peak holds both, docs/packs.md)
    evaluation: int  # one chunk of a batched evaluation of the K models, and the validation logits private selection reads
    history: int  # every configuration's recorded evaluations, kept until the pack ends

    @property
    def total(self) -> int:
        return self.tables + self.state + self.step + self.evaluation + self.history


def estimate(batches: list[float], evaluations: list[int], n_train: int, n_features: int, n_classes: int, n_parts: int, eval_rows: int,
             gpu: bool = False, selection: bool = False, batch_streams: int | None = None) -> PackMemory:
    """The model for a pack of K = ``len(batches)`` configurations of these expected batch sizes, each recording its
    number of ``evaluations`` on splits of at most ``eval_rows`` rows (logistic regression: c × d weights), with
    ``selection``: some configurations select their checkpoint privately, which reads the validation logits whole.
    ``batch_streams`` is the number of distinct Poisson batches a step draws (:attr:`~raco_bench.methods.lagrangian.engine.
    PackSettings.batch_draws`); None counts one per configuration (own batch draws: an upper bound).

    An evaluation works on one chunk of rows at a time (:func:`raco_bench.training.evaluation.evaluate_linear`).

    A step works on one chunk at a time, and a chunk holds configurations of similar batch size
    (:func:`raco_bench.packs.tensors.chunks`), so the step's arrays are those of the largest class of equal batch sizes
    (at most the chunk budget); every configuration's evaluations are kept until the pack ends."""
    c, d, K = n_classes, n_features, len(batches)
    per_slot = 4 * (c + 2 + n_parts) + 8  # float32 per-row arrays and an int64 row index per (configuration, slot)
    counts: dict[float, int] = {}
    for b in batches:
        counts[b] = counts.get(b, 0) + 1
    widest = max(n * poisson_width(n_train, b) for b, n in counts.items())  # configuration-slots of the largest chunk
    fused = not gpu and c == 2 and n_parts <= 2  # docs/packs.md, "Fused row passes": one float32 per slot and array
    arrays, slot = (FUSED_STEP_ARRAYS, 4) if fused else (STEP_ARRAYS, 4 * c)
    step = arrays * min(CHUNK_GPU if gpu else CHUNK_CPU, widest * slot) + widest * per_slot
    noise = sum(8 * K * count * block_steps(K, count) for count in (c * d + c, n_parts * c))  # Gaussian and Laplace drawn ahead
    width = max(poisson_width(n_train, b) for b in counts)
    D = K if batch_streams is None else batch_streams
    noise += 16 * D * width * block_steps(D, 2 * width)  # the distinct batches drawn ahead (raco_bench.packs.draws.BatchesAhead)
    state = K * (3 * 4 * (c * d + c) + 64 * 4) + noise  # params, update, settings and the noise blocks (float64)
    tables = 4 * (c + 2 + n_parts) * n_train + WORKING_BYTES
    chunk = min(eval_rows, chunk_rows("cuda" if gpu else "cpu", K))
    evaluation = EVAL_BYTES_PER_ROW * chunk * c * K + (4 * eval_rows * c * K if selection else 0)
    return PackMemory(tables=tables, state=state, step=step, evaluation=evaluation,
                      history=HISTORY_ENTRY_BYTES * sum(evaluations))


def evaluations_of(steps: int, eval_every: int, selection_checkpoints: int = 0) -> int:
    """How many evaluations a configuration of T = ``steps`` records: step 1, every ``eval_every``, T, its checkpoints."""
    return 2 + steps // eval_every + selection_checkpoints


PROCESS_BYTES = 800 * 2**20  # a Ray worker before its pack: Python, torch, Ray, MLflow, numba with the compiled kernels and the prepared runs
# (measured: 560–690 MiB before the kernels; `raco-bench bench memory` measures 620–680 MiB with them, 2026-11-26)
FREE_SHARE = 0.7  # of the node's available memory, what the packs running at once may take (Ray's monitor kills at 95 %)


@dataclass(frozen=True)
class DataShape:
    """What the model needs of a dataset: the training split's size and width, classes, rate-constraint cells (an upper
    bound: group × class) and the largest evaluation split."""

    n_train: int
    n_features: int
    n_classes: int
    n_parts: int
    eval_rows: int

    @staticmethod
    def of(dataset) -> "DataShape":
        return DataShape(len(dataset.train), dataset.n_features, dataset.n_classes, dataset.n_groups * dataset.n_classes,
                         max(len(dataset.val), len(dataset.test)))

    @property
    def dataset_bytes(self) -> int:
        """The dataset's float32 features in a worker (training and the two evaluation splits)."""
        return 4 * self.n_features * (self.n_train + 2 * self.eval_rows)


def available_memory() -> int | None:
    """This node's available memory in bytes (Linux ``MemAvailable``), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def largest_pack(limit: int, shape: DataShape, batch: float, evaluations: int, budget: float) -> int:
    """The largest K ≤ ``limit`` whose estimate, every configuration at expected batch ``batch`` with ``evaluations``
    evaluations and private selection (a sweep's widest and longest: an upper bound), fits ``budget`` bytes (at least
    1: a single run is trained whatever)."""
    def fits(k: int) -> bool:
        return estimate([batch] * k, [evaluations] * k, shape.n_train, shape.n_features, shape.n_classes, shape.n_parts, shape.eval_rows,
                        selection=True).total <= budget

    lo, hi = 1, max(1, limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def pack_budget(slots: float, shape: DataShape, free: int | None = None) -> float | None:
    """Bytes one pack may take when ``slots`` packs train at once on this node: a share of its available memory, less
    each worker's process and dataset. None where the available memory cannot be read."""
    free = available_memory() if free is None else free
    if free is None:
        return None
    return FREE_SHARE * free / max(slots, 1.0) - PROCESS_BYTES - shape.dataset_bytes
