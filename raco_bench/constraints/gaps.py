"""Test-time gap metrics: what a report draws for a constraint family, computed exactly on a split (docs/results.md).

A gap metric is a function of the counts of K models' hard predictions per (label, group) cell, ``counts`` K × y × a ×
ŷ (float64, exact), that gives one value per model, or None where it does not apply to the task (the FNR needs binary
labels). Every run records every registered gap on every split it evaluates (``<split>_<key>``, e.g. ``test_dp_gap``),
whatever constraint it trained under, so that runs of different families can be compared on one axis. A family names
the one its report draws (:attr:`raco_bench.constraints.families.Family.gap`). Adding a gap metric is one entry of
:data:`GAPS`; a family whose constraint value is its own test-time value names :data:`CONSTRAINT_VALUE` instead.

* ``dp_gap``: max_k (max_a − min_a) P(ŷ = k | a) over non-empty groups (for binary tasks fairlearn's
  ``demographic_parity_difference``);
* ``eo_gap``: max_{y,k} (max_a − min_a) P(ŷ = k | y, a) over non-empty cells (fairlearn's ``equalized_odds_difference``);
* ``fnr``: for binary tasks, the false-negative rate P(ŷ = 0 | y = 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

CONSTRAINT_VALUE = "max_constraint"  # the run's own constraint value (eq. 6, hard predictions), largest over its constraints


def cell_rate_gaps(counts: torch.Tensor) -> torch.Tensor:
    """Per model, max over classes k of (max − min) over non-empty cells of P(ŷ = k | cell), from counts K × cells × c."""
    sizes = counts[0].sum(-1)
    present = sizes > 0
    if int(present.sum()) < 2:
        return torch.zeros(counts.shape[0], dtype=torch.float64, device=counts.device)
    rates = counts[:, present] / sizes[present][None, :, None]
    return (rates.max(1).values - rates.min(1).values).max(1).values


def demographic_parity_gap(counts: torch.Tensor) -> torch.Tensor:
    """max_k (max_a − min_a) P(ŷ = k | a), from counts K × y × a × ŷ."""
    return cell_rate_gaps(counts.sum(1))


def equalized_odds_gap(counts: torch.Tensor) -> torch.Tensor:
    """max_{y,k} (max_a − min_a) P(ŷ = k | y, a) over the labels present, from counts K × y × a × ŷ."""
    per_label = [cell_rate_gaps(counts[:, label]) for label in range(counts.shape[1]) if bool(counts[0, label].sum() > 0)]
    return torch.stack(per_label).max(0).values if per_label else torch.zeros(counts.shape[0], dtype=torch.float64, device=counts.device)


def false_negative_rate(counts: torch.Tensor) -> torch.Tensor | None:
    """P(ŷ = 0 | y = 1) for binary tasks (None otherwise), from counts K × y × a × ŷ; 0 on a split without positives."""
    if counts.shape[1] != 2:
        return None
    positives = counts[:, 1].sum(1)  # K × ŷ, rows with y = 1
    total = positives[0].sum()
    return positives[:, 0] / total if bool(total > 0) else torch.zeros(counts.shape[0], dtype=torch.float64, device=counts.device)


@dataclass(frozen=True)
class Gap:
    """A test-time metric: its key (``<split>_<key>`` in MLflow and the results) and its value per model from the counts
    K × y × a × ŷ (None: it does not apply to this task)."""

    key: str
    of_counts: Callable[[torch.Tensor], torch.Tensor | None]
    description: str
    value_range: tuple[float, float] | None = None  # what its value can be (a report clips intervals to it); None: not declared


GAPS: dict[str, Gap] = {g.key: g for g in (
    Gap("dp_gap", demographic_parity_gap, "demographic-parity gap: max_k (max_a − min_a) P(ŷ = k | a)", (0.0, 1.0)),
    Gap("eo_gap", equalized_odds_gap, "equalized-odds gap: max_{y,k} (max_a − min_a) P(ŷ = k | y, a)", (0.0, 1.0)),
    Gap("fnr", false_negative_rate, "false-negative rate P(ŷ = 0 | y = 1) (binary tasks)", (0.0, 1.0)),
)}


def gap_keys() -> tuple[str, ...]:
    """Every registered gap metric's key, in registry order (read at call time: a test may register one)."""
    return tuple(GAPS)


def gaps_of_counts(counts: torch.Tensor, n_groups: int, n_classes: int) -> dict[str, list[float]]:
    """Every registered gap metric that applies, per model, from counts K × (y, a) cells × ŷ (label-major cells)."""
    cells = counts.view(-1, n_classes, n_groups, n_classes)  # K × y × a × ŷ
    out = {}
    for key, gap in GAPS.items():
        values = gap.of_counts(cells)
        if values is not None:
            out[key] = values.tolist()
    return out
