"""Evaluation on a full split with exact (non-private) statistics.

These numbers are computed from the exact data, not from a private release: they are for
evaluation and reporting only, and the checkpoint rule that uses them is labelled as not
privacy-accounted (docs/privacy.md, "Checkpoint rules").

Metrics: accuracy and error; each constraint's exact hard value Γ_j (hard argmax rates, eq. 6),
its max and the max violation max(0, max_j Γ_j − γ_j), whether every constraint holds; the soft
max; the demographic-parity gap max_k (max_a − min_a) P(ŷ=k | a), the equalized-odds gap
max_{y,k} (max_a − min_a) P(ŷ=k | y, a) (both over non-empty cells; for binary tasks these are
fairlearn's demographic_parity_difference and equalized_odds_difference), and for binary tasks the
false-negative rate P(ŷ=0 | y=1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.data.tabular import Split
from raco_bench.training.objective import tempered_softmax


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


def per_row_sums(onehot: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Σ_n onehot[n, g] · values[k, n, :] for every model k (K × G × c), as one matrix product."""
    K, N, c = values.shape
    flat = values.permute(1, 0, 2).reshape(N, K * c)
    return (onehot.T @ flat).view(-1, K, c).permute(1, 0, 2)


def linear_logits(weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Logits of K linear models (weight K × c × d, bias K × c) on the rows of X: K × N × c, one matrix product."""
    K, c, d = weight.shape
    return (X @ weight.reshape(K * c, d).T).view(-1, K, c).permute(1, 0, 2) + bias[:, None, :]


def _cell_rate_gaps(pred_onehot: torch.Tensor, cell: torch.Tensor, n_cells: int) -> torch.Tensor:
    """Per model, max over classes k of (max − min) over non-empty cells of P(ŷ = k | cell); K values."""
    K = pred_onehot.shape[0]
    cell_onehot = torch.nn.functional.one_hot(cell, n_cells).to(torch.float64)  # N × cells
    counts = cell_onehot.sum(0)
    present = counts > 0
    if int(present.sum()) < 2:
        return torch.zeros(K, dtype=torch.float64, device=pred_onehot.device)
    sums = per_row_sums(cell_onehot, pred_onehot)  # K × cells × c
    rates = sums[:, present] / counts[present][None, :, None]
    return (rates.max(1).values - rates.min(1).values).max(1).values


def fairness_gaps(pred: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int, n_classes: int) -> list[dict[str, float]]:
    """Demographic-parity and equalized-odds gaps (and the FNR for binary tasks) of K prediction vectors (K × N)."""
    onehot = torch.nn.functional.one_hot(pred, n_classes).to(torch.float64)
    dp = _cell_rate_gaps(onehot, group, n_groups)
    eo = [_cell_rate_gaps(onehot[:, y == label], group[y == label], n_groups) for label in range(n_classes) if bool((y == label).any())]
    eo_gap = torch.stack(eo).max(0).values if eo else torch.zeros_like(dp)
    out = [{"dp_gap": float(a), "eo_gap": float(b)} for a, b in zip(dp, eo_gap)]
    if n_classes == 2:
        positives = y == 1
        fnr = (pred[:, positives] != 1).double().mean(1) if bool(positives.any()) else torch.zeros_like(dp)
        for entry, value in zip(out, fnr):
            entry["fnr"] = float(value)
    return out


def _rate_values(rates: CompiledRates, probs: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """Γ_j of K models from their (soft or hard) predictions K × N × c: K × J (eq. 6)."""
    part_onehot = torch.nn.functional.one_hot(parts, rates.n_parts).to(probs.dtype)
    return rates.values(per_row_sums(part_onehot, probs))  # H: K × P × c (eq. 8)


@torch.no_grad()
def evaluate_logits(logits: torch.Tensor, split: EvalSplit, taus: list[float], n_groups: int, n_classes: int,
                    rates: CompiledRates | None, gammas: torch.Tensor | None) -> list[dict]:
    """The metrics of K models from their logits on ``split`` (K × N × c), one dict per model.

    ``taus`` are the models' temperatures (for the soft constraint values) and ``gammas`` (K × J)
    their targets; a single run evaluates with K = 1, a pack evaluates its due models at once.
    """
    pred = logits.argmax(-1)
    N = len(split.y)
    accuracy = (pred == split.y).double().mean(1) if N else torch.full((pred.shape[0],), float("nan"))
    out = fairness_gaps(pred, split.y, split.group, n_groups, n_classes)
    for entry, acc in zip(out, accuracy):
        entry["accuracy"] = float(acc)
        entry["error"] = 1.0 - entry["accuracy"]
    if rates is not None:
        hard = torch.nn.functional.one_hot(pred, n_classes).to(logits.dtype)
        values = _rate_values(rates, hard, split.parts).double()
        tau = torch.tensor(taus, dtype=logits.dtype, device=logits.device)[:, None, None]
        soft = _rate_values(rates, tempered_softmax(logits, tau), split.parts).double()
        gammas = gammas.double()
        for k, entry in enumerate(out):
            entry["constraint_values"] = values[k].cpu().tolist()
            entry["max_constraint"] = float(values[k].max())
            entry["max_violation"] = float((values[k] - gammas[k]).max().clamp_min(0.0))
            entry["satisfied"] = bool((values[k] <= gammas[k] + 1e-12).all())
            entry["max_soft_constraint"] = float(soft[k].max())
    return out
