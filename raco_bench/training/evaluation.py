"""Evaluation on a full split with exact (non-private) statistics.

These numbers are computed from the exact data, not from a private release: they are for
evaluation and reporting only, and the checkpoint rule that uses them is labelled as not
privacy-accounted (docs/privacy.md, "Checkpoint rules").

Metrics: accuracy and error; each constraint's exact hard value Γ_j (hard argmax rates, eq. 6),
its max and the max violation max(0, max_j Γ_j − γ_j), whether every constraint holds; the soft
max; the demographic-parity gap max_k (max_a − min_a) P(ŷ=k | a), the equalized-odds gap
max_{y,k} (max_a − min_a) P(ŷ=k | y, a) (both over non-empty cells; for binary tasks these are
fairlearn's demographic_parity_difference and equalized_odds_difference), for binary tasks the
false-negative rate P(ŷ=0 | y=1), and the bounded-group-loss family: each sensitive group's mean
cross-entropy of the model's predictive distribution softmax(τz) (``group_losses``) and its maximum
(``worst_group_loss``, docs/methods/budget-tailoring.md), for every method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.data.tabular import Split


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


def class_counts(pred: torch.Tensor, cells: torch.Tensor, n_cells: int, n_classes: int) -> torch.Tensor:
    """counts[k, g, j] = #{rows n in cell g with pred[n, k] = j} for K prediction vectors (pred N × K): K × cells × c
    (float64), from one matrix product of the cell one-hot with the prediction one-hot. The product sums 0/1
    values in float32, which is exact below 2²⁴ rows; larger splits sum in float64."""
    N, K = pred.shape
    dtype = torch.float32 if N < 2**24 else torch.float64
    hard = torch.stack([pred == j for j in range(n_classes)], 1).to(dtype)  # N × c × K
    in_cell = torch.nn.functional.one_hot(cells, n_cells).to(dtype)  # N × cells
    return (in_cell.T @ hard.view(N, n_classes * K)).view(n_cells, n_classes, K).permute(2, 0, 1).double()


def _cell_rate_gaps(counts: torch.Tensor) -> torch.Tensor:
    """Per model, max over classes k of (max − min) over non-empty cells of P(ŷ = k | cell), from counts K × cells × c."""
    sizes = counts[0].sum(-1)
    present = sizes > 0
    if int(present.sum()) < 2:
        return torch.zeros(counts.shape[0], dtype=torch.float64, device=counts.device)
    rates = counts[:, present] / sizes[present][None, :, None]
    return (rates.max(1).values - rates.min(1).values).max(1).values


def fairness_gaps(pred: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int, n_classes: int) -> list[dict[str, float]]:
    """Demographic-parity and equalized-odds gaps (and the FNR for binary tasks) of K prediction vectors (K × N),
    from the counts per (label, group) cell."""
    counts = class_counts(pred.T, y * n_groups + group, n_classes * n_groups, n_classes).view(-1, n_classes, n_groups, n_classes)  # K × y × a × ŷ
    dp = _cell_rate_gaps(counts.sum(1))
    eo = [_cell_rate_gaps(counts[:, label]) for label in range(n_classes) if bool(counts[0, label].sum() > 0)]
    eo_gap = torch.stack(eo).max(0).values if eo else torch.zeros_like(dp)
    out = [{"dp_gap": float(a), "eo_gap": float(b)} for a, b in zip(dp, eo_gap)]
    if n_classes == 2:
        positives = counts[:, 1].sum(1)  # K × ŷ, rows with y = 1
        total = positives[0].sum()
        fnr = positives[:, 0] / total if bool(total > 0) else torch.zeros_like(dp)
        for entry, value in zip(out, fnr):
            entry["fnr"] = float(value)
    return out


def _soft_histograms(logits: torch.Tensor, taus: torch.Tensor, parts: torch.Tensor, n_parts: int) -> torch.Tensor:
    """H[k, p, j] = Σ_{n in part p} σ_τk(z_nk)_j (eq. 8 with soft predictions) from logits N × c × K: K × P × c."""
    probs = logits * taus  # then in place: these arrays are N × c × K
    probs.sub_(probs.amax(1, keepdim=True)).exp_()
    probs.div_(probs.sum(1, keepdim=True))
    N, c, K = logits.shape
    in_part = torch.nn.functional.one_hot(parts, n_parts).to(probs.dtype)
    return (in_part.T @ probs.view(N, c * K)).view(n_parts, c, K).permute(2, 0, 1)


def group_losses(logits: torch.Tensor, taus: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Mean cross-entropy −log softmax(τ_k z)_y per sensitive group, K × G (NaN for an empty group), from logits N × c × K."""
    N, c, K = logits.shape
    z = logits * taus
    loss = torch.logsumexp(z, 1) - z.gather(1, y.view(N, 1, 1).expand(N, 1, K))[:, 0]  # N × K
    in_group = torch.nn.functional.one_hot(group, n_groups).to(loss.dtype)
    sums = in_group.T @ loss  # G × K
    sizes = in_group.sum(0)
    return (sums / sizes[:, None]).T.double()


@torch.no_grad()
def evaluate_logits(logits: torch.Tensor, split: EvalSplit, taus: list[float], n_groups: int, n_classes: int,
                    rates: CompiledRates | None, gammas: torch.Tensor | None, pred: torch.Tensor | None = None) -> list[dict]:
    """The metrics of K models from their logits on ``split`` (N × c × K), one dict per model.

    ``taus`` are the models' temperatures (for the soft constraint values) and ``gammas`` (K × J)
    their targets; a single run evaluates with K = 1, a pack evaluates its due models at once.
    Every count is one matrix product of a cell one-hot with the prediction one-hot
    (:func:`class_counts`), so K models cost little more than one. ``pred`` (N × K) overrides the
    hard predictions argmax would give: a randomised predictor passes one draw of its predictions
    and, as ``logits``, the log of its prediction probabilities (docs/methods/dp-postprocess.md).
    """
    if pred is None:
        pred = predictions(logits)  # N × K
    N = len(split.y)
    accuracy = (pred == split.y[:, None]).sum(0).double() / N if N else torch.full((pred.shape[1],), float("nan"))
    out = fairness_gaps(pred.T, split.y, split.group, n_groups, n_classes)
    tau = torch.tensor(taus, dtype=logits.dtype, device=logits.device)
    losses = group_losses(logits, tau, split.y, split.group, n_groups)
    for entry, acc, gl in zip(out, accuracy, losses):
        entry["accuracy"] = float(acc)
        entry["error"] = 1.0 - entry["accuracy"]
        entry["group_losses"] = gl.cpu().tolist()
        entry["worst_group_loss"] = float(gl[~gl.isnan()].max()) if bool((~gl.isnan()).any()) else float("nan")
    if rates is not None:
        dtype = rates.weights.dtype
        values = rates.values(class_counts(pred, split.parts, rates.n_parts, n_classes).to(dtype)).double()  # eq. 6, hard predictions
        soft = rates.values(_soft_histograms(logits, tau, split.parts, rates.n_parts).to(dtype)).double()
        gammas = gammas.double()
        for k, entry in enumerate(out):
            entry["constraint_values"] = values[k].cpu().tolist()
            entry["max_constraint"] = float(values[k].max())
            entry["max_violation"] = float((values[k] - gammas[k]).max().clamp_min(0.0))
            entry["satisfied"] = bool((values[k] <= gammas[k] + 1e-12).all())
            entry["max_soft_constraint"] = float(soft[k].max())
    return out
