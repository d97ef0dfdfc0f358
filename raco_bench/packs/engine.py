"""What the pack driver (:mod:`raco_bench.training.pack`) asks of a method's batched engine (docs/architecture.md,
"Adding a method"; docs/packs.md).

A method that can train K configurations in lockstep names its engine in ``Method.engine``. The engine is built
from the prepared runs of one pack (``Engine(runs, products)``), holds their state (``state``, saved by pack
checkpoints), their step counts (``steps``, a K-vector of T), takes one step of every configuration (``step()``)
and gives what evaluation needs: the K logistic models at some configurations (``linear(index)``), one
configuration's parameters (``params(k)``) and its diagnostics (``report(k)``). Which runs can share a pack is
the engine's to say: :meth:`Engine.blocker` (why a run cannot join any pack) and :meth:`Engine.pack_key` (runs
share a pack only with equal keys, beside the driver's own conditions: one method, one dataset, device, word
source, constraint structure and evaluation splits).

An engine whose class says ``runs_ahead`` takes ``ahead=`` (True, False, or None: by device) and can take its steps
without reading anything back to the host between evaluations (docs/packs.md, "The GPU path"); it then holds them in
``ahead`` (not None), and the driver calls :meth:`Engine.settle` before it reads anything of the state. Such an
engine also takes ``graph=`` (True, False, or None: on CUDA): whether that step is replayed as a CUDA graph.
"""

from __future__ import annotations

from typing import Any

import torch

INF = float("inf")  # "no clipping" / "no box" as a per-configuration number


def vector(runs: list, values, dtype=torch.float32) -> torch.Tensor:
    """One value per configuration, on the pack's device."""
    return torch.tensor(values, dtype=dtype, device=runs[0].ctx.device)


class Engine:
    """A batched engine over logistic-regression models (``state.weight`` K × c × d, ``state.bias`` K × c);
    subclasses add ``__init__(runs, products)``, ``step`` and ``report``."""

    state: Any
    steps: torch.Tensor
    runs_ahead = False  # whether the constructor takes ahead=
    ahead: Any = None  # the steps a device runs ahead on, where the engine takes them that way

    @classmethod
    def blocker(cls, run) -> str | None:
        """None if ``run`` can join a pack of this engine, else why not (by default: only logistic regression)."""
        return None if getattr(run.ctx.hyper, "model", "logistic") == "logistic" else "the MLP has no batched engine yet"

    @classmethod
    def pack_key(cls, run) -> Any:
        """Runs share a pack only when their keys are equal (e.g. one privacy mode per pack); None by default."""
        return None

    def step(self) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Called before the driver reads the state (an evaluation, a checkpoint, the end): an engine that runs ahead
        completes what it deferred. Nothing to do by default."""

    def close(self) -> None:
        """Called once the pack's results are read: release what the engine holds on its device. Nothing by default."""

    def report(self, k: int) -> dict:
        return {}

    def linear(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.state.weight[index], self.state.bias[index]

    def params(self, k: int) -> dict:
        return self.state.params(k)
