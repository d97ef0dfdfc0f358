"""A full training run: resolve the configuration, calibrate privacy, train, evaluate, select.

Method families handled by the trainer (packaged as plugins in :mod:`raco_bench.methods`):

| method | constraints | privacy |
|---|---|---|
| raco-dp | yes | Laplace histogram + clipped Gaussian gradient, PLD-accounted |
| sgda | yes | none: exact histogram, no clipping, no noise |
| dp-sgd | no | clipped Gaussian gradient, PLD-accounted |
| sgd | no | none |

Checkpoints are evaluated at step 1, every ``eval_every`` steps and at the last step. The paper's
selection rule (best validation accuracy among checkpoints whose exact hard constraints hold on the
training set) is reported as ``selected`` and labelled as not privacy-accounted; the last iterate
(``last``) is the privately released model.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from raco_bench.constraints import build_constraint
from raco_bench.constraints.problem import RateProblem
from raco_bench.data import TabularDataset, load_dataset
from raco_bench.models import build_model
from raco_bench.privacy.accounting import StepMechanism, epsilon, separate_composition_epsilon
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.training.config import RunConfig
from raco_bench.training.evaluation import EvalSplit, evaluate
from raco_bench.training.step import StepSettings, TrainData, TrainState, sgda_step

METHODS = {  # name: (uses constraints, private)
    "raco-dp": (True, True),
    "sgda": (True, False),
    "dp-sgd": (False, True),
    "sgd": (False, False),
}
SELECTION_LABEL = "not privacy-accounted: selected with exact train-set constraints and validation accuracy"


@dataclass
class RunResult:
    config: dict
    dataset: dict
    privacy: dict
    steps: int
    history: list[dict] = field(default_factory=list)
    last: dict = field(default_factory=dict)
    selected: dict | None = None
    timing: dict = field(default_factory=dict)
    final_params: dict | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("final_params")
        return out


def resolve_method(name: str) -> tuple[bool, bool]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}") from None


def privacy_mechanism(cfg: RunConfig, n_train: int) -> StepMechanism | None:
    """The per-step mechanism of a private method (None for non-private methods)."""
    constrained, private = resolve_method(cfg.method)
    if not private:
        return None
    h = cfg.hyper
    if h.noise_multiplier <= 0 or (constrained and h.laplace_scale <= 0):
        raise ValueError(
            f"method {cfg.method} is private but noise_multiplier={h.noise_multiplier}, laplace_scale={h.laplace_scale}: "
            "zero noise gives no privacy; use a positive noise, or method 'sgda' / 'sgd' for non-private training"
        )
    return StepMechanism(
        sampling_rate=h.batch_size / n_train,
        noise_multiplier=h.noise_multiplier,
        laplace_scale=h.laplace_scale if constrained else None,
        histogram_batch=h.histogram_batch,
    )


def plan_steps(cfg: RunConfig, mech: StepMechanism | None, cache: CalibrationCache) -> int:
    """T: the configured number of steps, or the largest the (ε, δ) budget allows."""
    if mech is None:
        return cfg.steps or cfg.default_steps
    if cfg.steps is not None:
        spent = epsilon(mech, cfg.steps, cfg.delta)
        if spent > cfg.epsilon:
            raise ValueError(
                f"steps={cfg.steps} would spend epsilon={spent:.4f} > the budget {cfg.epsilon}; "
                "lower steps, raise epsilon, or leave steps unset to calibrate it"
            )
        return cfg.steps
    T = cache.max_steps(mech, cfg.epsilon, cfg.delta, cfg.max_steps)
    if T == 0:
        raise ValueError(
            f"the budget epsilon={cfg.epsilon}, delta={cfg.delta} does not allow a single step with "
            f"q={mech.sampling_rate:.4g}, noise_multiplier={mech.noise_multiplier}, laplace_scale={mech.laplace_scale}; "
            "raise the noise or epsilon, or lower batch_size"
        )
    return T


def build_problem(cfg: RunConfig, ds: TabularDataset) -> RateProblem | None:
    constrained, _ = resolve_method(cfg.method)
    if not constrained:
        return None
    return build_constraint(cfg.constraint, ds.n_groups, ds.n_classes, cfg.gamma)


def _step_settings(cfg: RunConfig, n: int, private: bool, constrained: bool) -> StepSettings:
    h = cfg.hyper
    return StepSettings(
        sampling_rate=h.batch_size / n,
        expected_batch=float(h.batch_size),
        clip_norm=h.clip_norm if private else None,
        noise_std=h.noise_multiplier * h.clip_norm if private else 0.0,
        laplace_scale=h.laplace_scale if (private and constrained) else None,
        temperature=h.temperature,
        lr=h.lr,
        dual_lr=h.dual_lr,
        dual_update=h.dual_update,
        histogram_batch=h.histogram_batch,
        lambda_max=h.lambda_max,
        dual_momentum=h.dual_momentum,
        clip_constraint_value=h.clip_constraint_value,
    )


def _progress_printer(stream=sys.stderr) -> Callable[[dict], None]:
    def show(entry: dict) -> None:
        tr, va = entry["train"], entry["val"]
        extra = f" max_viol {tr['max_violation']:.3f}" if "max_violation" in tr else ""
        print(f"  step {entry['step']:>5}/{entry['total']}: train acc {tr['accuracy']:.4f}{extra} | val acc {va['accuracy']:.4f} dp_gap {va['dp_gap']:.3f}", file=stream, flush=True)

    return show


def train(
    cfg: RunConfig,
    dataset: TabularDataset | None = None,
    cache: CalibrationCache | None = None,
    progress: Callable[[dict], None] | bool | None = None,
) -> RunResult:
    """Run one configuration end to end. Everything is validated before any training starts."""
    cfg.validate()
    constrained, private = resolve_method(cfg.method)
    ds = dataset if dataset is not None else load_dataset(cfg.dataset, seed=cfg.split_seed)
    n = len(ds.train)
    cfg.hyper.validate(n_train=n)
    problem = build_problem(cfg, ds)
    mech = privacy_mechanism(cfg, n)
    cache = cache or CalibrationCache()
    t0 = time.perf_counter()
    T = plan_steps(cfg, mech, cache)
    calibration_s = time.perf_counter() - t0
    show = _progress_printer() if progress is True else (progress or None)

    device = torch.device(cfg.device)
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg.seed)
    model = build_model(cfg.hyper.model, ds.n_features, ds.n_classes, cfg.hyper.hidden)
    rates = problem.compile(device) if problem is not None else None
    part_ids = {k: (problem.partition.assign(s.y, s.group) if problem else None) for k, s in ds.splits().items()}
    X = torch.as_tensor(ds.train.X, device=device)
    y = torch.as_tensor(ds.train.y, device=device)
    parts = None if part_ids["train"] is None else torch.as_tensor(part_ids["train"], device=device)
    data = TrainData.build(X, y, ds.n_classes, parts, problem.partition.n_parts if problem else 0)
    evals = {k: EvalSplit.from_split(s, part_ids[k], device) for k, s in ds.splits().items()}
    settings = _step_settings(cfg, n, private, constrained)
    J = problem.n_constraints if problem else 0
    state = TrainState(model.init(gen, device), torch.zeros(J, device=device), torch.zeros(J, device=device), 0, gen)

    history: list[dict] = []
    selected: dict | None = None
    step_time = 0.0
    eval_at = set(range(cfg.eval_every, T + 1, cfg.eval_every)) | {1, T}
    for t in range(1, T + 1):
        s0 = time.perf_counter()
        state, release = sgda_step(state, data, model, settings, rates)
        step_time += time.perf_counter() - s0
        if t in eval_at:
            entry = {"step": t, "total": T}
            for name, split in evals.items():
                entry[name] = evaluate(model, state.params, split, cfg.hyper.temperature, ds.n_groups, ds.n_classes, rates)
            if rates is not None:
                entry["lambda_max"] = float(state.lam.max()) if J else 0.0
                entry["noisy_constraint_max"] = float(release.constraint_estimates.max())
            history.append(entry)
            if show:
                show(entry)
            feasible = entry["train"].get("satisfied", True)
            if feasible and (selected is None or entry["val"]["accuracy"] > selected["val"]["accuracy"]):
                selected = {k: entry[k] for k in ("step", "train", "val", "test")}

    privacy = {"private": private, "delta": cfg.delta, "target_epsilon": cfg.epsilon if private else None, "steps": T}
    if mech is not None:
        privacy.update(
            epsilon_spent=epsilon(mech, T, cfg.delta),
            sampling_rate=mech.sampling_rate,
            noise_multiplier=mech.noise_multiplier,
            laplace_scale=mech.laplace_scale,
            histogram_batch=mech.histogram_batch if mech.laplace_scale is not None else None,
            accounting=("joint PLD of one Poisson batch feeding Gaussian and Laplace" if mech.laplace_scale is not None and mech.histogram_batch == "shared"
                        else "dp-accounting PLD composition of Poisson-subsampled mechanisms"),
            epsilon_separate_composition_reference=separate_composition_epsilon(mech, T, cfg.delta),
            epsilon_separate_composition_note="what composing the two subsampled mechanisms separately claims (reference implementation); understates a shared batch",
        )
    else:
        privacy.update(epsilon_spent=math.inf, accounting="none (non-private)")
    if selected is not None:
        selected["label"] = SELECTION_LABEL
    return RunResult(
        config=cfg.to_dict(),
        dataset={"name": ds.name, "n_train": n, "n_val": len(ds.val), "n_test": len(ds.test), "n_features": ds.n_features,
                 "n_groups": ds.n_groups, "n_classes": ds.n_classes, "n_constraints": J, "note": ds.note},
        privacy=privacy,
        steps=T,
        history=history,
        last={k: history[-1][k] for k in ("train", "val", "test")} if history else {},
        selected=selected,
        timing={"calibration_s": calibration_s, "train_s": step_time, "ms_per_step": 1000 * step_time / max(T, 1)},
        final_params={k: v.detach().cpu().numpy() for k, v in state.params.items()},
    )
