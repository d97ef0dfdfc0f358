"""Private checkpoint selection (``checkpoint="private"``, docs/privacy.md, "Checkpoint rules").

At ``K`` evenly spaced steps the run releases, for the current model, the validation counts
N[l, y, k] = #{validation rows in part l with label y predicted k} plus iid Laplace(b) per cell.
One record is in exactly one cell, so each release has L1 sensitivity 1 under add/remove and costs
one Laplace(b) mechanism (under replace-one, e.g. DP-FERMI's sensitive-attribute notion, a record
moves between two cells: two unit releases); the K releases are composed with the training releases
by the accountant (:class:`~raco_bench.privacy.accounting.SelectionRelease`). Everything below is post-processing of
the noisy counts: the noisy validation accuracy Σ_{l,y} Ñ[l,y,y] / Σ Ñ and the noisy hard constraint
values from Ĥ[l, k] = Σ_y Ñ[l, y, k] (eq. 12, n̂ = max(1, row sums)). The rule mirrors the papers':
the best noisy accuracy among checkpoints whose noisy constraints all hold, else the last iterate.

The Laplace draws come from their own stream (the run's seed, purpose SELECTION, the checkpoint's step), so the training
trajectory is the same whatever the checkpoint rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.privacy.accounting import SelectionRelease
from raco_bench.privacy.counter_rng import SELECTION, Stream
from raco_bench.training.evaluation import EvalSplit


def selection_steps(total_steps: int, count: int) -> list[int]:
    """``count`` evenly spaced steps ending at T (fewer when T < count: fewer releases than accounted)."""
    return sorted({max(1, round(total_steps * i / count)) for i in range(1, count + 1)})


def validation_counts(logits: torch.Tensor, split: EvalSplit, n_parts: int, n_classes: int) -> torch.Tensor:
    """N[l, y, k] over the split's rows (part l, label y, prediction k)."""
    cell = (split.parts * n_classes + split.y) * n_classes + logits.argmax(1)
    counts = torch.zeros(n_parts * n_classes * n_classes, dtype=torch.float64, device=logits.device)
    counts.index_add_(0, cell, torch.ones_like(cell, dtype=torch.float64))
    return counts.view(n_parts, n_classes, n_classes)


def noisy_scores(noisy: torch.Tensor, rates: CompiledRates) -> tuple[float, torch.Tensor]:
    """(noisy accuracy, noisy constraint values) from noisy counts Ñ[l, y, k] (post-processing only)."""
    total = float(noisy.sum())
    correct = float(torch.diagonal(noisy, dim1=1, dim2=2).sum())
    accuracy = correct / max(total, 1.0)
    H = noisy.sum(1).to(rates.membership.dtype)
    return accuracy, rates.values(H).double()


@dataclass
class PrivateSelector:
    release: SelectionRelease
    rates: CompiledRates
    stream: Stream
    best: dict | None = None
    releases: list[dict] = field(default_factory=list)  # every noisy release, for audits and tests

    @staticmethod
    def for_run(release: SelectionRelease, rates: CompiledRates, stream: Stream) -> "PrivateSelector":
        return PrivateSelector(release, rates, stream)

    def observe(self, step: int, logits: torch.Tensor, split: EvalSplit) -> bool:
        """Release this checkpoint's noisy counts; True if it is now the selected checkpoint."""
        exact = validation_counts(logits, split, self.rates.n_parts, self.rates.n_classes)
        noisy = exact + self.release.laplace_scale * self.stream.laplace(step, exact.numel(), SELECTION, exact.dtype).view_as(exact)
        accuracy, values = noisy_scores(noisy, self.rates)
        feasible = bool((values <= self.rates.gamma.double()).all())
        entry = {"step": step, "noisy_val_accuracy": accuracy, "noisy_val_max_constraint": float(values.max()),
                 "noisy_feasible": feasible, "noisy_counts": noisy.cpu()}
        self.releases.append(entry)
        if feasible and (self.best is None or accuracy > self.best["noisy_val_accuracy"]):
            self.best = entry
            return True
        return False
