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

from raco_bench.packs.draws import BYTES_PER_WORD, ahead_steps, block_steps
from raco_bench.privacy.counter_rng import poisson_width
from raco_bench.training.evaluation import eval_rows as chunk_rows

HISTORY_ENTRY_BYTES = 1_700  # one recorded evaluation of one configuration (Python dicts of every split's metrics): tracemalloc, docs/packs.md
EVAL_BYTES_PER_ROW = 24  # per row, class and model of one evaluation chunk: its logits and working arrays, counted from the code
WORKING_BYTES = 24 * 2**20  # what torch and the allocator keep once a pack has run a step and an evaluation, fitted to measured peaks
STEP_ARRAYS = 6  # per-slot arrays of a chunk alive at once (constants, logits, probabilities, residual, coefficients, mask)
FUSED_STEP_ARRAYS = 4  # with the compiled two-class passes (a CPU, at most two parts): the margin, τ·margin, p₀ and the residual
CHUNK_CPU, CHUNK_GPU = 2**26, 2**30  # raco_bench.packs.tensors.chunk_budget
GPU_WORKING_BYTES = 2**30  # NOT MEASURED (no GPU was lent): what torch's CUDA caching allocator keeps beyond the arrays
# counted (its rounding of blocks, fragmentation, cuBLAS's workspace), taken large so that the model errs towards smaller packs
FREE_SHARE_GPU = 0.8  # of the device's free memory, what a pack may take (NOT MEASURED: a margin for what the model misses)


@dataclass(frozen=True)
class PackMemory:
    """Bytes a pack of K configurations holds at its peak, by part."""

    tables: int  # the training split's per-row constants the pack builds (X itself is the dataset's), and the working set
    state: int  # parameters, multipliers, settings and the noise draws held ahead (raco_bench.packs.draws)
    step: int  # one chunk's per-slot arrays (counted beside the evaluation's: measured, a pack's peak holds both, docs/packs.md)
    evaluation: int  # one chunk of a batched evaluation of the K models, and the validation logits private selection reads
    history: int  # every configuration's recorded evaluations, kept until the pack ends (on the host, also for a GPU pack)

    @property
    def total(self) -> int:
        return self.tables + self.state + self.step + self.evaluation + self.history

    @property
    def on_device(self) -> int:
        """What a pack on a GPU holds in the device's memory: all but the history, which is the host's."""
        return self.tables + self.state + self.step + self.evaluation


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
    if gpu:
        return _ahead_estimate(batches, evaluations, n_train, n_features, n_classes, n_parts, eval_rows, selection, batch_streams)
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


def _ahead_estimate(batches: list[float], evaluations: list[int], n_train: int, d: int, c: int, P: int, eval_rows: int, selection: bool,
                    batch_streams: int | None) -> PackMemory:
    """:func:`estimate` on a GPU, for the step a device runs ahead on (:class:`~raco_bench.methods.lagrangian.engine.
    AheadSteps`): one pass over every configuration at the pack's widest padded width, with the rows copied out
    (``GatheredRows``: 4·d bytes per configuration-slot), and batches and noise drawn a block of steps at a time
    (:func:`~raco_bench.packs.draws.ahead_steps`: the blocks kept, plus the largest call's working memory). The counts
    per element are the code's; :data:`GPU_WORKING_BYTES` is not measured."""
    K = len(batches)
    D = K if batch_streams is None else batch_streams
    width = poisson_width(n_train, max(batches))
    per_slot = 4 * d + STEP_ARRAYS * 4 * c + 4 * (c + 2 + P) + 8 + 1  # the row copied out, the per-row arrays, the mask
    step = K * width * per_slot
    gaussian, laplace = c * d + c, 2 * P * c  # words per configuration and step (a Laplace draw takes two)
    L_g, L_l, L_b = ahead_steps(K, gaussian), ahead_steps(K, laplace), ahead_steps(D, width)
    kept = 8 * K * (gaussian * L_g + P * c * L_l) + 17 * D * width * L_b  # float64 noise; rows (int64), valid and cut per slot
    call = max(BYTES_PER_WORD * K * gaussian * L_g, BYTES_PER_WORD * K * laplace * L_l, (BYTES_PER_WORD + 24) * D * width * L_b)
    state = 2 * K * (3 * 4 * (c * d + c) + 64 * 4) + kept + call  # the state and the one kept to take steps again from
    tables = 4 * (c + 2 + P) * n_train + GPU_WORKING_BYTES
    chunk = min(eval_rows, chunk_rows("cuda", K))
    evaluation = EVAL_BYTES_PER_ROW * chunk * c * K + (4 * eval_rows * c * K if selection else 0)
    return PackMemory(tables=tables, state=state, step=step, evaluation=evaluation, history=HISTORY_ENTRY_BYTES * sum(evaluations))


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


def device_free_memory(device) -> int | None:
    """The free memory of a CUDA ``device`` in bytes (``torch.cuda.mem_get_info``), None for any other device."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(device)[0])


def largest_pack_on_device(limit: int, shape: "DataShape", batch: float, evaluations: int, free: int, batch_streams: int | None = None) -> int:
    """The largest K ≤ ``limit`` whose GPU estimate (every configuration at expected batch ``batch``, ``evaluations``
    evaluations, private selection: an upper bound) fits :data:`FREE_SHARE_GPU` of the device's ``free`` bytes, less
    the dataset's tensors on the device (at least 1)."""
    budget = FREE_SHARE_GPU * free - shape.dataset_bytes

    def fits(k: int) -> bool:
        streams = None if batch_streams is None else min(k, batch_streams)
        return estimate([batch] * k, [evaluations] * k, shape.n_train, shape.n_features, shape.n_classes, shape.n_parts, shape.eval_rows,
                        gpu=True, selection=True, batch_streams=streams).on_device <= budget

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
