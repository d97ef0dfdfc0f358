"""Evaluation on a full split with exact (non-private) statistics.

These numbers are computed from the exact data, not from a private release: they are for
evaluation and reporting only, and the checkpoint rule that uses them is labelled as not
privacy-accounted (docs/privacy.md, "Checkpoint rules").

Metrics: accuracy and error; each constraint's exact hard value Γ_j (hard argmax rates, eq. 6),
its max and the max violation max(0, max_j Γ_j − γ_j), whether every constraint holds; the soft
max; every registered gap metric (:mod:`raco_bench.constraints.gaps`: the demographic-parity gap, the equalized-odds gap,
for binary tasks the false-negative rate), whatever the run's constraint; the share of the most predicted class (``top_class_share``, what the health verdict's
one-class rule reads, :mod:`raco_bench.training.health`), and the bounded-group-loss family: each sensitive group's mean
cross-entropy of the model's predictive distribution softmax(τz) (``group_losses``) and its maximum
(``worst_group_loss``, docs/methods/budget-tailoring.md), for every method. Those and the soft max
(:data:`LOSS_METRICS`) cost a softplus and a sigmoid per row and model, so a run keeps them only in
entries that can be reported (:meth:`raco_bench.training.loop.RunRecorder.reportable`; docs/packs.md, "Speed").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from raco_bench.constraints.gaps import gaps_of_counts
from raco_bench.constraints.problem import CompiledRates, RateProblem
from raco_bench.data.tabular import Split
from raco_bench.jit import kernel

LOSS_METRICS = ("group_losses", "worst_group_loss", "max_soft_constraint")  # the costly metrics: every row's softplus and sigmoid


@dataclass(frozen=True)
class EvalSplit:
    X: torch.Tensor
    y: torch.Tensor
    group: torch.Tensor
    parts: torch.Tensor | None

    @staticmethod
    def from_split(split: Split, part_ids: np.ndarray | None, device: torch.device) -> "EvalSplit":
        return EvalSplit(
            torch.as_tensor(split.X, device=device),
            torch.as_tensor(split.y, device=device),
            torch.as_tensor(split.group, device=device),
            None if part_ids is None else torch.as_tensor(part_ids, device=device),
        )

    @staticmethod
    def for_problem(split: Split, problem: RateProblem, device: torch.device) -> "EvalSplit":
        """The split with each row's part of ``problem``'s partition (what the constraint rates are computed on)."""
        return EvalSplit.from_split(split, problem.partition.assign(split.y, split.group), device)

    def rows(self, start: int, stop: int) -> "EvalSplit":
        """Rows ``start:stop`` of the split (views, no copy)."""
        return EvalSplit(self.X[start:stop], self.y[start:stop], self.group[start:stop], None if self.parts is None else self.parts[start:stop])


def cell_ids(y: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Each row's (label, group) cell, label-major: y · n_groups + group (the cells every count of this module uses)."""
    return y * n_groups + group


def linear_logits(weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Logits of K linear models (weight K × c × d, bias K × c) on the rows of X, N × c × K: one matrix product."""
    K, c, d = weight.shape
    return torch.addmm(bias.T.reshape(c * K), X, weight.transpose(0, 1).reshape(c * K, d).T).view(-1, c, K)


def predictions(logits: torch.Tensor) -> torch.Tensor:
    """argmax over classes of logits N × c × K: N × K, as ``torch.argmax`` picks (the first of tied maxima; a
    NaN counts as the largest value, so a diverged model predicts its first NaN class). A running
    comparison over the few classes, which is far faster than ``argmax`` over a middle dimension."""
    best, pred = logits[:, 0], torch.zeros(logits.shape[0], logits.shape[2], dtype=torch.int64, device=logits.device)
    for j in range(1, logits.shape[1]):
        x = logits[:, j]
        better = (x > best) | (x.isnan() & ~best.isnan())
        pred = torch.where(better, j, pred)
        best = torch.where(better, x, best)
    return pred


def _cell_sums(values: torch.Tensor, cells: torch.Tensor, n_cells: int) -> torch.Tensor:
    """S[g, m] = Σ_{rows n in cell g} values[n, m]: one product of the cell one-hot (cells × N) with ``values`` (N × M)."""
    return torch.nn.functional.one_hot(cells, n_cells).to(values.dtype).T @ values


def _exact_dtype(n_rows: int) -> torch.dtype:
    """float32 sums 0/1 values exactly below 2²⁴ rows; larger splits sum in float64."""
    return torch.float32 if n_rows < 2**24 else torch.float64


def class_counts(pred: torch.Tensor, cells: torch.Tensor, n_cells: int, n_classes: int) -> torch.Tensor:
    """counts[k, g, j] = #{rows n in cell g with pred[n, k] = j} for K prediction vectors (pred N × K): K × cells × c
    (float64), from one matrix product of the cell one-hot with the prediction one-hot (exact, :func:`_exact_dtype`)."""
    N, K = pred.shape
    hard = torch.stack([pred == j for j in range(n_classes)], 1).to(_exact_dtype(N))  # N × c × K
    return _cell_sums(hard.view(N, n_classes * K), cells, n_cells).view(n_cells, n_classes, K).permute(2, 0, 1).double()


def _binary_counts(positive: torch.Tensor, cells: torch.Tensor, n_cells: int) -> torch.Tensor:
    """Two-class sums per cell, K × cells × 2 (float64), from each row's class-1 share ``positive`` (N × K): class 1 is
    one product, class 0 the cell's size minus it. With the 0/1 indicator [pred = 1] in an exact dtype these are
    :func:`class_counts` (exact integers); with the probability softmax(τz)₁, the soft histogram."""
    ones = _cell_sums(positive, cells, n_cells).double()  # cells × K
    sizes = cells.new_zeros(n_cells, dtype=torch.float64).index_add_(0, cells, cells.new_ones(cells.shape, dtype=torch.float64))  # no read-back
    return torch.stack([sizes[:, None] - ones, ones], -1).permute(1, 0, 2)  # K × cells × 2


@dataclass
class SplitCounts:
    """What every metric of K models on a split is computed from: ``counts`` K × (label, group) cells × ŷ (hard
    predictions, exact), ``loss_sums`` K × G (Σ of each row's cross-entropy of softmax(τz) per sensitive group),
    and with rate constraints ``hard`` and ``soft`` K × P × c (eq. 8 histograms of the hard and the soft
    predictions per part). ``loss_sums`` and ``soft`` are None where the evaluation left out the loss metrics
    (:data:`LOSS_METRICS`)."""

    counts: torch.Tensor
    loss_sums: torch.Tensor | None
    hard: torch.Tensor | None
    soft: torch.Tensor | None

    def __add__(self, other: "SplitCounts") -> "SplitCounts":
        """The counts of two disjoint sets of rows together: every field is a sum over rows."""
        def add(a, b):
            return None if a is None else a + b

        return SplitCounts(self.counts + other.counts, add(self.loss_sums, other.loss_sums), add(self.hard, other.hard), add(self.soft, other.soft))


def _general_counts(logits: torch.Tensor, pred: torch.Tensor, split: EvalSplit, taus: torch.Tensor, n_groups: int, n_classes: int,
                    n_parts: int | None, losses: bool = True) -> SplitCounts:
    """:class:`SplitCounts` for any number of classes from logits N × c × K and predictions N × K."""
    counts = class_counts(pred, cell_ids(split.y, split.group, n_groups), n_classes * n_groups, n_classes)
    N, c, K = logits.shape
    hard = class_counts(pred, split.parts, n_parts, n_classes) if n_parts is not None else None
    if not losses:
        return SplitCounts(counts, None, hard, None)
    z = logits * taus
    loss = torch.logsumexp(z, 1) - z.gather(1, split.y.view(N, 1, 1).expand(N, 1, K))[:, 0]  # N × K
    soft = _soft_histograms(logits, taus, split.parts, n_parts) if n_parts is not None else None
    return SplitCounts(counts, _cell_sums(loss, split.group, n_groups).T, hard, soft)


def _binary_counts_of_margins(margin: torch.Tensor, split: EvalSplit, taus: torch.Tensor, n_groups: int, n_parts: int | None,
                              losses: bool = True, check: bool = True) -> SplitCounts | None:
    """:class:`SplitCounts` of two-class models from their margins D = z₁ − z₀ (N × K), in arrays of N × K rather
    than N × 2 × K: ŷ = [D > 0] (argmax picks class 0 on a tie), softmax(τz)₁ = sigmoid(τD), and the cross-entropy
    −log softmax(τz)_y = softplus(τD) for y = 0 and softplus(−τD) for y = 1. None where a margin is NaN (their sum
    is NaN): the argmax rules for NaN (:func:`predictions`) need both logits. ``check=False`` skips that check (a read
    back): the caller checks the margins itself (:func:`counts_on_device`)."""
    if not losses and margin.device.type == "cpu":
        return _binary_counts_compiled(margin, split, n_groups, n_parts)
    if check and bool(margin.sum().isnan()):
        return None
    N = margin.shape[0]
    positive = torch.sign(margin).clamp_min_(0).to(_exact_dtype(N))  # [D > 0]; faster than a comparison's bool array
    counts = _binary_counts(positive, cell_ids(split.y, split.group, n_groups), 2 * n_groups)
    hard = _binary_counts(positive, split.parts, n_parts) if n_parts is not None else None
    if not losses:
        return SplitCounts(counts, None, hard, None)
    zt = margin * taus
    soft = _binary_counts(torch.sigmoid(zt), split.parts, n_parts) if n_parts is not None else None
    sign = (1 - 2 * split.y).to(zt.dtype)
    loss_sums = _cell_sums(torch.nn.functional.softplus(zt.mul_(sign[:, None])), split.group, n_groups).T
    return SplitCounts(counts, loss_sums, hard, soft)


def _binary_counts_compiled(margin: torch.Tensor, split: EvalSplit, n_groups: int, n_parts: int | None) -> SplitCounts | None:
    """:func:`_binary_counts_of_margins` without the loss metrics on a CPU, in one compiled pass over the margins
    (:func:`_count_positives`; docs/packs.md, "Fused row passes") instead of a dozen torch operations per chunk: each
    row adds [D > 0] of its K models to its cell's and its part's counts. The counts are exact integers in float64.
    None where a margin is NaN (or ±inf, whose product with 0 is NaN: the general path then counts the chunk)."""
    N, K = margin.shape
    cells = cell_ids(split.y, split.group, n_groups).numpy()
    parts = split.parts.numpy() if n_parts is not None else np.zeros(N, np.int64)
    n_cells, P = 2 * n_groups, n_parts or 1
    ones_cells, ones_parts = np.zeros((n_cells, K)), np.zeros((P, K))
    rows_cells, rows_parts = np.zeros(n_cells), np.zeros(P)
    if not _count_positives(margin.contiguous().numpy(), cells, parts, ones_cells, ones_parts, rows_cells, rows_parts):
        return None

    def counts(ones: np.ndarray, rows: np.ndarray) -> torch.Tensor:  # K × cells × 2: class 0 is the cell's rows minus class 1
        return torch.from_numpy(np.stack([rows[:, None] - ones, ones], -1).transpose(1, 0, 2).copy())

    return SplitCounts(counts(ones_cells, rows_cells), None, counts(ones_parts, rows_parts) if n_parts is not None else None, None)


@kernel
def _count_positives(margin, cells, parts, ones_cells, ones_parts, rows_cells, rows_parts):
    """Per row i: rows_cells[cells[i]] and rows_parts[parts[i]] count it, and ones_cells[cells[i], k] and
    ones_parts[parts[i], k] add [margin[i, k] > 0] for each model k. False where a margin is NaN or infinite."""
    N, K = margin.shape
    check = 0.0
    for i in range(N):
        c, p = cells[i], parts[i]
        rows_cells[c] += 1.0
        rows_parts[p] += 1.0
        oc, op, m = ones_cells[c], ones_parts[p], margin[i]
        for k in range(K):
            positive = 1.0 if m[k] > 0 else 0.0
            oc[k] += positive
            op[k] += positive
            check += 0.0 * m[k]  # NaN once a margin is NaN or infinite
    return check == 0.0


def split_counts(logits: torch.Tensor, split: EvalSplit, taus: torch.Tensor, n_groups: int, n_classes: int, n_parts: int | None,
                 pred: torch.Tensor | None = None, losses: bool = True) -> SplitCounts:
    """:class:`SplitCounts` of K models from their logits on ``split`` (N × c × K). Two-class models with argmax
    predictions take the margin path (:func:`_binary_counts_of_margins`) unless a margin is NaN; any other case the
    general path. ``losses=False`` leaves out the loss sums and the soft histogram."""
    if n_classes == 2 and pred is None:
        counts = _binary_counts_of_margins(logits[:, 1] - logits[:, 0], split, taus, n_groups, n_parts, losses)
        if counts is not None:
            return counts
    if pred is None:
        pred = predictions(logits)
    return _general_counts(logits, pred, split, taus, n_groups, n_classes, n_parts, losses)


def fairness_gaps(pred: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int, n_classes: int) -> list[dict[str, float]]:
    """Every registered gap metric (:mod:`raco_bench.constraints.gaps`: the demographic-parity and equalized-odds gaps, the
    FNR for binary tasks) of K prediction vectors (K × N), from the counts per (label, group) cell."""
    gaps = gaps_of_counts(class_counts(pred.T, cell_ids(y, group, n_groups), n_classes * n_groups, n_classes), n_groups, n_classes)
    return [dict(zip(gaps, values)) for values in zip(*gaps.values())]


def _soft_histograms(logits: torch.Tensor, taus: torch.Tensor, parts: torch.Tensor, n_parts: int) -> torch.Tensor:
    """H[k, p, j] = Σ_{n in part p} σ_τk(z_nk)_j (eq. 8 with soft predictions) from logits N × c × K: K × P × c."""
    probs = logits * taus  # then in place: these arrays are N × c × K
    probs.sub_(probs.amax(1, keepdim=True)).exp_()
    probs.div_(probs.sum(1, keepdim=True))
    N, c, K = logits.shape
    return _cell_sums(probs.view(N, c * K), parts, n_parts).view(n_parts, c, K).permute(2, 0, 1)


@torch.no_grad()
def evaluate_logits(logits: torch.Tensor, split: EvalSplit, taus: list[float], n_groups: int, n_classes: int,
                    rates: CompiledRates | None, gammas: torch.Tensor | None, pred: torch.Tensor | None = None, losses: bool = True) -> list[dict]:
    """The metrics of K models from their logits on ``split`` (N × c × K), one dict per model.

    ``taus`` are the models' temperatures (for the soft constraint values) and ``gammas`` (K × J)
    their targets; a single run evaluates with K = 1, a pack evaluates its due models at once.
    Every count is one matrix product of a cell one-hot with the prediction one-hot
    (:func:`class_counts`), so K models cost little more than one. ``pred`` (N × K) overrides the
    hard predictions argmax would give: a randomised predictor passes one draw of its predictions
    and, as ``logits``, the log of its prediction probabilities (docs/methods/dp-postprocess.md). ``losses=False``
    leaves out :data:`LOSS_METRICS`, the costly part (a softplus and a sigmoid per row and model).
    """
    tau = torch.tensor(taus, dtype=logits.dtype, device=logits.device)
    stats = split_counts(logits, split, tau, n_groups, n_classes, rates.n_parts if rates is not None else None, pred, losses)
    return metrics_of_counts(stats, split, n_groups, n_classes, rates, gammas)


EVAL_ROWS_CPU = 1024  # rows per chunk of a batched evaluation on a CPU, at least: the chunk's N × c × K arrays stay in cache
EVAL_CELLS_CPU = 2**18  # rows × models per chunk on a CPU: fewer models, longer chunks (at most 16 × EVAL_ROWS_CPU)
EVAL_ROWS_GPU = 2**16  # on a GPU: few, large kernels (docs/packs.md, "Evaluation"), at most
EVAL_CELLS_GPU = 2**26  # rows × models per chunk on a GPU: a pack of thousands evaluates in chunks of fewer rows (memory)


def eval_rows(device: torch.device | str, models: int = 1) -> int:
    """Rows per chunk of :func:`evaluate_linear` of ``models`` models on ``device``. On a CPU a chunk holds about
    :data:`EVAL_CELLS_CPU` (row, model) values: with few models (the end of a pack) a chunk's fixed cost, not its
    arithmetic, decides, and longer chunks cut it (Heart's validation split, 5 models: 2.9 → 1.5 ms an evaluation)."""
    if getattr(device, "type", device) != "cpu":
        return max(EVAL_ROWS_CPU, min(EVAL_ROWS_GPU, EVAL_CELLS_GPU // max(models, 1)))
    return max(EVAL_ROWS_CPU, min(16 * EVAL_ROWS_CPU, EVAL_CELLS_CPU // max(models, 1)))


@torch.no_grad()
def evaluate_linear(weight: torch.Tensor, bias: torch.Tensor, split: EvalSplit, taus: list[float], n_groups: int, n_classes: int,
                    rates: CompiledRates | None, gammas: torch.Tensor | None, rows: int | None = None, losses: bool = True) -> list[dict]:
    """:func:`evaluate_logits` of K linear models (weight K × c × d, bias K × c), ``rows`` rows at a time: every
    statistic is a sum over rows (:class:`SplitCounts`), so the chunks' counts add up, and the logits never exist
    as one N × c × K array. On two cores this is about 3× faster than one pass over the split (the arrays of a chunk
    stay in cache), and its memory is that of one chunk. ``rows`` defaults to :func:`eval_rows` of the device."""
    rows = rows or eval_rows(weight.device, weight.shape[0])
    tau = torch.tensor(taus, dtype=weight.dtype, device=weight.device)
    n_parts = rates.n_parts if rates is not None else None
    if n_classes == 2:  # the margins' weights: D = x·(w₁ − w₀) + (b₁ − b₀), one product of K columns instead of 2K
        weight_gap, bias_gap = (weight[:, 1] - weight[:, 0]).T.contiguous(), bias[:, 1] - bias[:, 0]
    total = None
    for start in range(0, max(len(split.y), 1), rows):
        chunk = split.rows(start, start + rows)
        counts = None
        if n_classes == 2:
            counts = _binary_counts_of_margins(torch.addmm(bias_gap, chunk.X, weight_gap), chunk, tau, n_groups, n_parts, losses)
        if counts is None:
            counts = split_counts(linear_logits(weight, bias, chunk.X), chunk, tau, n_groups, n_classes, n_parts, losses=losses)
        total = counts if total is None else total + counts
    return metrics_of_counts(total, split, n_groups, n_classes, rates, gammas)


def counts_on_device(weight: torch.Tensor, bias: torch.Tensor, split: EvalSplit, taus: torch.Tensor, n_groups: int, n_classes: int,
                     n_parts: int | None, rows: int | None = None) -> tuple[SplitCounts, torch.Tensor]:
    """:func:`evaluate_linear`'s counts, loss metrics included, computed without reading anything back to the host (a
    pack that runs ahead on a device reads an evaluation's counts back once: :func:`counts_to_host`), and whether a
    two-class margin was NaN (a device bool: then the margins' counts are not argmax's, and the split is counted again
    by :func:`evaluate_linear`)."""
    rows = rows or eval_rows(weight.device, weight.shape[0])
    nan = torch.zeros((), dtype=torch.bool, device=weight.device)
    if n_classes == 2:
        weight_gap, bias_gap = (weight[:, 1] - weight[:, 0]).T.contiguous(), bias[:, 1] - bias[:, 0]
    total = None
    for start in range(0, max(len(split.y), 1), rows):
        chunk = split.rows(start, start + rows)
        if n_classes == 2:
            margin = torch.addmm(bias_gap, chunk.X, weight_gap)
            nan = nan | margin.sum().isnan()
            counts = _binary_counts_of_margins(margin, chunk, taus, n_groups, n_parts, losses=True, check=False)
        else:
            logits = linear_logits(weight, bias, chunk.X)
            counts = _general_counts(logits, predictions(logits), chunk, taus, n_groups, n_classes, n_parts)
        total = counts if total is None else total + counts
    return total, nan


def counts_to_host(counts: dict[str, tuple[SplitCounts, torch.Tensor]]) -> dict[str, tuple[SplitCounts, bool]]:
    """Every split's :func:`counts_on_device` on the host, in one transfer (the fields flattened into one float64 vector)."""
    fields = [(name, f) for name, (stats, _) in counts.items() for f in ("counts", "loss_sums", "hard", "soft") if getattr(stats, f) is not None]
    parts = [getattr(counts[name][0], f) for name, f in fields] + [nan for _, nan in counts.values()]
    flat = torch.cat([x.reshape(-1).double() for x in parts]).cpu().split([x.numel() for x in parts])
    host = {name: dict.fromkeys(("counts", "loss_sums", "hard", "soft")) for name in counts}
    for (name, f), x, like in zip(fields, flat, parts):
        host[name][f] = x.reshape(like.shape).to(like.dtype)
    nans = flat[len(fields):]
    return {name: (SplitCounts(**host[name]), bool(nan)) for name, nan in zip(counts, nans)}


def on_host(split: EvalSplit) -> EvalSplit:
    """What :func:`metrics_of_counts` reads of a split (its labels and groups; no features), on the host."""
    return EvalSplit(split.X[:0].cpu(), split.y.cpu(), split.group.cpu(), None if split.parts is None else split.parts.cpu())


def metrics_of_counts(stats: SplitCounts, split: EvalSplit, n_groups: int, n_classes: int, rates: CompiledRates | None,
                      gammas: torch.Tensor | None) -> list[dict]:
    """The metrics of K models (one dict per model) from their :class:`SplitCounts` on ``split``."""
    N = len(split.y)
    cells = stats.counts.view(-1, n_classes, n_groups, n_classes)  # K × y × a × ŷ
    correct = torch.stack([cells[:, j, :, j].sum(1) for j in range(n_classes)]).sum(0)
    accuracy = (correct / N).tolist() if N else [float("nan")] * len(correct)
    gaps = gaps_of_counts(stats.counts, n_groups, n_classes)
    top = (stats.counts.sum(1).max(1).values / N).tolist() if N else [float("nan")] * len(correct)  # the most predicted class's share
    out = [{**{key: values[k] for key, values in gaps.items()}, "accuracy": acc, "error": 1.0 - acc, "top_class_share": share}
           for k, (acc, share) in enumerate(zip(accuracy, top))]
    if stats.loss_sums is not None:
        sizes = torch.bincount(split.group, minlength=n_groups).double()
        for entry, gl in zip(out, (stats.loss_sums.double() / sizes).tolist()):  # NaN for an empty group
            present = [v for v in gl if v == v]
            entry["group_losses"], entry["worst_group_loss"] = gl, max(present) if present else float("nan")
    if rates is not None:
        dtype = rates.weights.dtype
        values = rates.values(stats.hard.to(dtype)).double()  # eq. 6, hard predictions
        soft_max = rates.values(stats.soft.to(dtype)).double().max(1).values.tolist() if stats.soft is not None else None
        violation = (values - gammas.double()).max(1).values.clamp_min(0.0).tolist()
        satisfied = (values <= gammas.double() + 1e-12).all(1).tolist()
        for k, (entry, v) in enumerate(zip(out, values.tolist())):
            entry["constraint_values"] = v
            entry["max_constraint"] = max(v)
            entry["max_violation"] = violation[k]
            entry["satisfied"] = satisfied[k]
            if soft_max is not None:
                entry["max_soft_constraint"] = soft_max[k]
    return out
