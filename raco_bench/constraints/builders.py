"""Builders for the paper's constraint families (paper App. A); each family names its builder in the registry
(:mod:`raco_bench.constraints.families`, docs/architecture.md "Adding a constraint").

| builder | partition | constraints |
|---|---|---|
| :func:`demographic_parity` | groups (K = G) | (k, a): P̃_k(D_a) − P̃_k(D∖D_a) ≤ γ, c·G of them (eq. 7, 13) |
| :func:`equalized_odds` | (label, group) (K = c·G) | (k, y, a): P̃_k(D_{y,a}) − P̃_k(D_{y,¬a}) ≤ γ, c²·G (eqs. 14–16) |
| :func:`false_negative_rate` | labels (K = c) | k: 1 − P̃_k(D_{y=k}) ≤ γ, one per bounded class (eq. 17) |

All are one-sided; two-sidedness comes from including both a group and its complement. With
binary labels and groups the c·G encoding repeats each distinct constraint twice (docs/methods/raco-dp.md, D10), which
the project keeps so that counts match the paper (ACS: 2 classes × 9 groups = 18).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from raco_bench.constraints.partition import Partition
from raco_bench.constraints.problem import RateConstraint, RateProblem


def _one_vs_rest(c: int, k: int) -> np.ndarray:
    w = np.zeros((2, c))
    w[0, k], w[1, k] = 1.0, -1.0
    return w


def demographic_parity(n_groups: int, n_classes: int, gamma: float) -> RateProblem:
    part = Partition("group", n_groups, n_classes)
    cons = []
    for k in range(n_classes):
        for a in range(n_groups):
            rest = tuple(b for b in range(n_groups) if b != a)
            if not rest:
                raise ValueError("demographic parity needs at least two groups")
            cons.append(RateConstraint(((a,), rest), _one_vs_rest(n_classes, k), gamma, f"dp[k={k},a={a}]"))
    return RateProblem(part, tuple(cons), "demographic-parity")


def equalized_odds(n_groups: int, n_classes: int, gamma: float) -> RateProblem:
    part = Partition("label_group", n_groups, n_classes)
    cons = []
    for k in range(n_classes):
        for y in range(n_classes):
            for a in range(n_groups):
                cell = (part.part(label=y, group=a),)
                rest = tuple(part.part(label=y, group=b) for b in range(n_groups) if b != a)
                if not rest:
                    raise ValueError("equalized odds needs at least two groups")
                cons.append(RateConstraint((cell, rest), _one_vs_rest(n_classes, k), gamma, f"eo[k={k},y={y},a={a}]"))
    return RateProblem(part, tuple(cons), "equalized-odds")


def false_negative_rate(n_classes: int, gamma: float, classes: Iterable[int] | None = None, n_groups: int = 1) -> RateProblem:
    """FNR_k = 1 − P̃_k(D_{y=k}) = Σ_{k'≠k} P̃_{k'}(D_{y=k}) ≤ γ for each k in ``classes``
    (default: every class, the paper's count c; the experiments bound the positive class only)."""
    part = Partition("label", n_groups, n_classes)
    ks = list(range(n_classes)) if classes is None else [int(k) for k in classes]
    cons = []
    for k in ks:
        if not 0 <= k < n_classes:
            raise ValueError(f"class {k} is outside [0, {n_classes})")
        w = np.ones((1, n_classes))
        w[0, k] = 0.0
        cons.append(RateConstraint(((k,),), w, gamma, f"fnr[k={k}]"))
    return RateProblem(part, tuple(cons), "false-negative-rate")


def custom(partition: Partition, constraints: Sequence[dict], name: str = "custom") -> RateProblem:
    """Constraints from plain data: each a dict with ``subsets`` (lists of part ids), ``weights``
    (|subsets| × c) and ``gamma`` (and optionally ``name``)."""
    cons = []
    for j, spec in enumerate(constraints):
        missing = {"subsets", "weights", "gamma"} - set(spec)
        if missing:
            raise ValueError(f"custom constraint #{j} lacks {sorted(missing)}; give subsets, weights and gamma")
        subsets = tuple(tuple(s) for s in spec["subsets"])
        cons.append(RateConstraint(subsets, np.asarray(spec["weights"], dtype=float), float(spec["gamma"]), spec.get("name", f"custom[{j}]")))
    return RateProblem(partition, tuple(cons), name)
