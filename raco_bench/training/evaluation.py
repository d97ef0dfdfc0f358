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


def _cell_rate_gap(pred: torch.Tensor, cell: torch.Tensor, n_cells: int, n_classes: int) -> torch.Tensor:
    """Per class k, (max − min) over non-empty cells of P(ŷ = k | cell); returns the max over k."""
    onehot = torch.nn.functional.one_hot(pred, n_classes).to(torch.float64)
    counts = torch.zeros(n_cells, dtype=torch.float64, device=pred.device).index_add_(0, cell, torch.ones_like(cell, dtype=torch.float64))
    sums = torch.zeros(n_cells, n_classes, dtype=torch.float64, device=pred.device).index_add_(0, cell, onehot)
    present = counts > 0
    if present.sum() < 2:
        return torch.zeros((), dtype=torch.float64)
    rates = sums[present] / counts[present, None]
    return (rates.max(0).values - rates.min(0).values).max()


def fairness_gaps(pred: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int, n_classes: int) -> dict[str, float]:
    out = {"dp_gap": float(_cell_rate_gap(pred, group, n_groups, n_classes))}
    eo = [
        _cell_rate_gap(pred[y == label], group[y == label], n_groups, n_classes)
        for label in range(n_classes)
        if bool((y == label).any())
    ]
    out["eo_gap"] = float(max(eo)) if eo else 0.0
    if n_classes == 2:
        positives = y == 1
        out["fnr"] = float((pred[positives] != 1).double().mean()) if bool(positives.any()) else 0.0
    return out


@torch.no_grad()
def evaluate(model, params, split: EvalSplit, tau: float, n_groups: int, n_classes: int, rates: CompiledRates | None) -> dict:
    logits = model.logits(params, split.X)
    pred = logits.argmax(1)
    metrics: dict = {"accuracy": float((pred == split.y).double().mean()) if len(split.y) else float("nan")}
    metrics["error"] = 1.0 - metrics["accuracy"]
    metrics.update(fairness_gaps(pred, split.y, split.group, n_groups, n_classes))
    if rates is not None:
        hard = torch.nn.functional.one_hot(pred, n_classes).to(logits.dtype)
        values = rates.values(rates.histogram(hard, split.parts)).double()
        soft = rates.values(rates.histogram(tempered_softmax(logits, tau), split.parts)).double()
        gamma = rates.gamma.double()
        metrics["constraint_values"] = values.cpu().tolist()
        metrics["max_constraint"] = float(values.max())
        metrics["max_violation"] = float((values - gamma).max().clamp_min(0.0))
        metrics["satisfied"] = bool((values <= gamma + 1e-12).all())
        metrics["max_soft_constraint"] = float(soft.max())
    return metrics
