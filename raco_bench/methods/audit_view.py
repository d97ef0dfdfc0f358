"""What the white-box audit (:mod:`raco_bench.audit.whitebox`) asks of a method: an audit view of one step of its
batched engine, and the canary helpers every view uses (docs/audit.md, "White-box audit").

A method gives its view through ``Method.audit_view(run, canary_row, engine)``. The view names the step's releases
as blocks (K × m tensors), says which noise each block carries under the claim (Gaussian with a std, or Laplace
with a scale, per configuration) and how large the canary's contribution to it can be (its clipping bound, for
the accountant's own worst case), and provides the worlds the auditor compares: D (the training rows), D′ (D
with the canary appended last, so that a seed's Poisson batch of the other rows is unchanged) and the canary
alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch

from raco_bench.data.tensors import TrainData
from raco_bench.packs.tensors import take_rows

CONFIDENT_BIAS = 12.0  # the starting bias of the predicted class: soft predictions within e^-12 of one-hot
CANARY_SCALE = 10.0  # the canary's features, times the row's: its gradient is clipped


@dataclass(frozen=True)
class WorstCase:
    """One release in the accountant's worst case, in normalised units: a Gaussian coordinate of noise 1 shifted by
    ``gauss_mu`` and/or a Laplace cell of scale ``laplace_scale`` shifted by 1, present when the canary is in the
    release's batch (probability q when ``sampled``, always otherwise). One inclusion draw covers both."""

    gauss_mu: float | None
    laplace_scale: float | None
    sampled: bool = True


@dataclass
class AuditView:
    """A run's releases as the audit sees them.

    A run of T steps makes ``phases(T)`` releases (one per step by default; a view may add releases before the first
    step or after the last). ``release(state, world, settings)`` returns (blocks, the engine's raw release) of the
    next one; ``apply(state, settings, raw)`` the state after it. ``noise[block]`` is ("gauss", std) or ("laplace",
    scale), the scale a vector per configuration or a function of the state (when the run's own earlier releases
    set it); ``bound[block]`` the largest norm of the canary's contribution under the claim (the L2 clipping norm of
    a Gaussian block, the L1 mass of a Laplace one). ``sampled(state)`` says whether the next release reads a
    Poisson batch (the canary is then in it with probability q). ``settings`` are the engine's K = 1 settings (a
    dataclass of K-vectors with ``seeds``, ``sampling_rate`` and ``private``), ``state`` the starting state,
    ``worlds`` the data of "D", "D'" and "canary" (each with ``X``). ``worst_case(T)`` lists the releases of the
    accountant's worst case, for the audit's ideal (by default one sampled release per step from ``noise`` and
    ``bound``)."""

    release: Callable
    apply: Callable
    noise: dict
    bound: dict[str, float]
    state: object
    settings: object
    worlds: dict
    expected_batch: float
    unobserved: str = ""  # what the claim covers that the view does not observe (named in the audit's note)
    phases: Callable[[int], int] = lambda steps: steps
    sampled: Callable[[object], bool] = lambda state: True
    worst: Callable[[int], list] | None = None
    start: dict | None = None  # the auditor-chosen starting parameters, where the state does not hold them (for checks)

    def scale(self, block: str, state, K: int) -> torch.Tensor:
        """The noise scale of ``block`` for each of K runs in ``state``."""
        scale = self.noise[block][1]
        scale = scale(state) if callable(scale) else scale
        return scale.repeat(K) if scale.numel() == 1 else scale

    def worst_case(self, steps: int) -> list[WorstCase]:
        if self.worst is not None:
            return self.worst(steps)
        mu2, lap = 0.0, None
        for name, (kind, scale) in self.noise.items():
            if kind == "gauss":
                mu2 += (self.bound[name] / float(scale[0])) ** 2
            else:
                lap = float(scale[0]) / self.bound[name]
        return [WorstCase(math.sqrt(mu2) if mu2 else None, lap)] * steps

    def repeated(self, seeds: torch.Tensor, **changes):
        """The settings for every seed in ``seeds`` (tensor fields repeated), with ``changes``. Each run draws its batches
        from its own stream (``batch_seeds`` = ``seeds``): the audit's runs must be independent, never share batches."""
        many = take_rows(self.settings, torch.zeros(len(seeds), dtype=torch.long, device=seeds.device))
        own = {"batch_seeds": seeds} if "batch_seeds" in {f.name for f in dataclasses.fields(many)} else {}
        return dataclasses.replace(many, seeds=seeds, **own, **changes)


def canary_row(data: TrainData, row: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, y, table row) of the canary: training row ``row`` with its features × CANARY_SCALE and its label flipped."""
    c = data.n_classes
    x = data.X[row] * CANARY_SCALE
    y = (data.y[row] + 1) % c
    table = data.table[row].clone()
    table[:c] = torch.nn.functional.one_hot(y, c).to(table.dtype)
    table[c] = x.square().sum() + 1.0
    return x, y, table


def with_row(data: TrainData, x: torch.Tensor, y: torch.Tensor, table: torch.Tensor) -> TrainData:
    """``data`` with one more row, last (a Poisson batch of the other rows is then unchanged for a seed)."""
    return TrainData(torch.cat([data.X, x[None]]), torch.cat([data.y, y[None]]), torch.cat([data.table, table[None]]),
                     data.n_classes, data.n_parts)


def only_row(data: TrainData, x: torch.Tensor, y: torch.Tensor, table: torch.Tensor) -> TrainData:
    return TrainData(x[None].clone(), y[None].clone(), table[None].clone(), data.n_classes, data.n_parts)


def confident(bias: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """A starting bias under which every row (the canary included) is predicted, confidently, as not ``label``."""
    out = torch.zeros_like(bias)
    out[..., (int(label) + 1) % bias.shape[-1]] = CONFIDENT_BIAS
    return out
