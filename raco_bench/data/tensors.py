"""The training split as device tensors, the form every engine reads (a single run's step and a pack's)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TrainData:
    """The training split as device tensors, with per-sample constants in one table.

    ``table`` rows are [one-hot label (c) | ‖x‖² + 1 | one-hot part (K)], so that one gather per
    step fetches everything a batch needs (labels, rank-1 gradient norms, histogram rows).
    """

    X: torch.Tensor
    y: torch.Tensor
    table: torch.Tensor
    n_classes: int
    n_parts: int

    @staticmethod
    def build(X: torch.Tensor, y: torch.Tensor, n_classes: int, parts: torch.Tensor | None = None, n_parts: int = 0) -> "TrainData":
        cols = [torch.nn.functional.one_hot(y, n_classes).to(X.dtype), (X.pow(2).sum(1) + 1.0)[:, None]]
        if parts is not None:
            cols.append(torch.nn.functional.one_hot(parts, n_parts).to(X.dtype))
        return TrainData(X, y, torch.cat(cols, 1).contiguous(), n_classes, n_parts if parts is not None else 0)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    def labels_onehot(self, rows: torch.Tensor) -> torch.Tensor:
        return rows[:, : self.n_classes]

    def sq_norms(self, rows: torch.Tensor) -> torch.Tensor:
        return rows[:, self.n_classes]

    def parts_onehot(self, rows: torch.Tensor) -> torch.Tensor:
        return rows[:, self.n_classes + 1 :]
