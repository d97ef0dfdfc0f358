"""The global partition D = D_1 ⊔ … ⊔ D_K on which rates are computed (paper §3, Remark 1).

The partition is public structure. Parts are built from group ids (``"group"``: K = G), from
labels (``"label"``: K = c) or from (label, group) pairs (``"label_group"``: K = c·G, part id
y·G + a). Each sample lies in exactly one part, which is what bounds the L1 sensitivity of the
histogram H[l, k] by 1 under add/remove adjacency (paper §4.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("group", "label", "label_group")


@dataclass(frozen=True)
class Partition:
    kind: str
    n_groups: int
    n_classes: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown partition kind {self.kind!r}; choose one of {KINDS}")
        if self.n_groups < 1 or self.n_classes < 2:
            raise ValueError(f"a partition needs n_groups >= 1 and n_classes >= 2, got {self.n_groups}, {self.n_classes}")

    @property
    def n_parts(self) -> int:
        return {"group": self.n_groups, "label": self.n_classes, "label_group": self.n_classes * self.n_groups}[self.kind]

    def part(self, *, group: int | None = None, label: int | None = None) -> int:
        """Part id of a (group, label) cell; only the coordinates the partition uses are needed."""
        if self.kind == "group":
            return self._check(group, self.n_groups, "group")
        if self.kind == "label":
            return self._check(label, self.n_classes, "label")
        return self._check(label, self.n_classes, "label") * self.n_groups + self._check(group, self.n_groups, "group")

    @staticmethod
    def _check(value: int | None, bound: int, what: str) -> int:
        if value is None or not 0 <= int(value) < bound:
            raise ValueError(f"{what} {value!r} is outside [0, {bound})")
        return int(value)

    def assign(self, label: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Part id of every sample (int64)."""
        label = np.asarray(label, dtype=np.int64)
        group = np.asarray(group, dtype=np.int64)
        if self.kind == "group":
            return group
        if self.kind == "label":
            return label
        return label * self.n_groups + group

    def part_names(self, group_names: tuple[str, ...] | None = None, class_names: tuple[str, ...] | None = None) -> list[str]:
        gn = group_names or tuple(str(g) for g in range(self.n_groups))
        cn = class_names or tuple(str(k) for k in range(self.n_classes))
        if self.kind == "group":
            return [f"group={g}" for g in gn]
        if self.kind == "label":
            return [f"label={k}" for k in cn]
        return [f"label={k},group={g}" for k in cn for g in gn]
