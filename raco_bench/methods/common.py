"""What several method families share: batch-size checks and choices, T from a step calibration, the training tensors,
the note that names a private checkpoint selection in a privacy plan."""

from __future__ import annotations

import torch

from raco_bench.data.tensors import TrainData
from raco_bench.methods.base import Context
from raco_bench.privacy.accounting import epsilon
from raco_bench.privacy.calibration import StepsProblem

BATCH_SIZES = (256, 512, 1024, 2048, 4096)  # searched expected batch sizes (those <= n_train / 2)


def check_batch(ctx: Context, batch_size: int) -> float:
    """q = B / n, validated against the training-set size."""
    if batch_size > ctx.n_train:
        raise ValueError(f"invalid batch_size={batch_size}: q = batch_size / n_train must be in (0, 1]; n_train = {ctx.n_train}")
    return batch_size / ctx.n_train


def default_batch_size(n_train: int, largest: int) -> int:
    """``raco-bench train``'s expected batch size where none is set: the power of two nearest n/32 (q ≈ 1/32, about
    Adult's q at B = 1,024), at most ``largest`` (the method's default). At ε = 1 a q of 1/4 (B = 1,024 on Parkinsons' 3,745
    rows) leaves the accountant 2 steps; q ≈ 1/32 leaves a few hundred (README, "Training")."""
    import math

    return int(min(largest, 2 ** max(0, round(math.log2(max(n_train, 1) / 32)))))


def batch_choices(n_train: int) -> list[int]:
    """The searched expected batch sizes that fit the training split (at most half of it)."""
    return [b for b in BATCH_SIZES if b <= n_train // 2] or [max(1, n_train // 4)]


def plan_steps(ctx: Context, problem: StepsProblem | None, default_steps: int) -> int:
    """T: the run's steps (checked against the budget), or the largest the (ε, δ) budget allows."""
    run = ctx.config
    if problem is None:
        return run.steps or min(default_steps, run.max_steps)
    mech = problem.mechanism
    if run.steps is not None:
        spent = epsilon(mech, run.steps, run.delta, run.selection)
        if spent > run.epsilon:
            raise ValueError(
                f"steps={run.steps} would spend epsilon={spent:.4f} > the budget {run.epsilon}; "
                "lower steps, raise epsilon, or leave steps unset to calibrate it"
            )
        return run.steps
    T = int(ctx.cache.solve(problem))
    if T == 0:
        raise ValueError(
            f"the budget epsilon={run.epsilon}, delta={run.delta} does not allow a single step with q={mech.sampling_rate:.4g}, "
            f"noise_multiplier={mech.noise_multiplier}, laplace_scale={mech.laplace_scale}; raise the noise or epsilon, or lower batch_size"
        )
    return T


def selection_note(selection) -> str:
    return f", composed with {selection.count} Laplace({selection.laplace_scale:g}) validation-count releases (private checkpoint selection)"


def train_tensors(ctx: Context, with_parts: bool) -> TrainData:
    """The training split as device tensors (with the parts of the run's constraint): built once per dataset, device and
    partition (what a row's part depends on), and shared by the runs prepared on that dataset (``TabularDataset.tensors``)."""
    key = ("train", str(ctx.device), with_parts, ctx.problem.partition if with_parts else None)
    return ctx.dataset.shared_tensors(key, lambda: _train_tensors(ctx, with_parts))


def _train_tensors(ctx: Context, with_parts: bool) -> TrainData:
    ds, dev = ctx.dataset, ctx.device
    X = torch.as_tensor(ds.train.X, device=dev)
    y = torch.as_tensor(ds.train.y, device=dev)
    if not with_parts:
        return TrainData.build(X, y, ds.n_classes)
    parts = torch.as_tensor(ctx.problem.partition.assign(ds.train.y, ds.train.group), device=dev)
    return TrainData.build(X, y, ds.n_classes, parts, ctx.problem.partition.n_parts)
