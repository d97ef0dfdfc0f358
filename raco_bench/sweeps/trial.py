"""One sweep trial: train one (method, ε, γ, configuration, seed) and log it to MLflow exactly once.

Every method of a sweep reports its model under the sweep's one checkpoint rule (``checkpoint``:
``last``, the private last iterate, or ``paper``, the papers' selection, outside the budget and
labelled), so a figure never compares unlike rules. Last-iterate metrics are always logged too
(``last_*``); the artifacts hold the reported model (``weights.npz``, and as a loadable MLflow pyfunc
model with its signature, see :mod:`raco_bench.mlflow_model`) and the last iterate beside it
(``weights_last.npz``). What the run read outside the budget is in the ``outside_budget`` tag. Evaluation curves are step-indexed
metrics named ``eval/<split>_<metric>`` (steps = training steps), kept apart from the reported values,
and streamed to MLflow while the trial trains (batched, see :class:`raco_bench.tracking.LiveMetrics`).
"""

from __future__ import annotations

import json
import math
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from raco_bench import mlflow_model, tracking
from raco_bench.methods import get_method

METRICS = ("accuracy", "error", "max_constraint", "max_violation", "dp_gap", "eo_gap", "fnr", "satisfied")


@lru_cache(maxsize=4)
def _dataset(name: str, split_seed: int, preprocessing: str):
    from raco_bench.data import load_dataset

    return load_dataset(name, seed=split_seed, preprocessing=preprocessing)


NOT_DIAGNOSTICS = {"step", "total", "train", "val", "test"}
PRIVACY_RUN_FIELDS = ("epsilon", "delta")
SELECTION_RUN_FIELDS = ("selection_noise", "selection_checkpoints")


def run_params(config: dict, private: bool) -> dict:
    """The run's settings as MLflow params; a non-private run logs no privacy budget, and selection
    settings appear only when the checkpoint rule uses them."""
    out = {}
    for k, v in config.items():
        if k == "params" or (not private and k in PRIVACY_RUN_FIELDS) or (config.get("checkpoint") != "private" and k in SELECTION_RUN_FIELDS):
            continue
        out[f"run.{k}"] = v
    return out


def _flat(prefix: str, block: dict) -> dict[str, float]:
    out = {}
    for k in METRICS:
        if k in block:
            out[f"{prefix}{k}"] = float(block[k])
    return out


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
    except Exception:  # noqa: BLE001 - outside Ray
        return "local"


def _device(requested: str) -> tuple[str, str]:
    """(device, GPU ids Ray assigned): "auto" means CUDA when Ray gave the trial a GPU that torch can use."""
    gpu_ids = ""
    try:
        import ray

        if ray.is_initialized():
            gpu_ids = ",".join(str(g) for g in ray.get_gpu_ids())
    except Exception:  # noqa: BLE001 - outside Ray
        pass
    if requested != "auto":
        return requested, gpu_ids
    import torch

    return ("cuda" if gpu_ids and torch.cuda.is_available() else "cpu"), gpu_ids


def summary_from_run(run) -> dict:
    m = run.data.metrics
    return {"val_accuracy": m.get("val_accuracy", math.nan), "val_max_constraint": m.get("val_max_constraint", math.inf),
            "test_accuracy": m.get("test_accuracy", math.nan), "test_max_constraint": m.get("test_max_constraint", math.nan),
            "epsilon_spent": m.get("epsilon_spent", math.nan), "reused": 1.0}


def history_points(entry: dict) -> list[tracking.Point]:
    """One evaluation's step-indexed points: ``eval/<split>_<metric>`` and whatever the method's report() returns as ``eval/<name>``."""
    step = entry["step"]
    points = [(f"eval/{split}_{k}", float(entry[split][k]), step) for split in ("train", "val", "test")
              for k in ("accuracy", "max_constraint", "dp_gap", "eo_gap", "fnr") if k in entry[split]]
    points += [(f"eval/{k}", float(v), step) for k, v in entry.items() if k not in NOT_DIAGNOSTICS and isinstance(v, (int, float))]
    return points


def execute_trial(trial: dict, tracking_uri: str, experiment_id: str, parent_run_id: str, device: str = "cpu",
                  flush_every_s: float = 10.0) -> dict:
    """Train and log one trial; a trial already complete in MLflow is returned without retraining."""
    import torch

    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import train

    torch.set_num_threads(1)  # one CPU per trial
    run_id, done, reused = tracking.get_or_create_trial_run(tracking_uri, experiment_id, parent_run_id, trial)
    if done is not None:
        return summary_from_run(done)
    device, gpu_ids = _device(device)
    tags = {"raco_bench.trial": json.dumps(trial, sort_keys=True), "device": device, "ray_node_id": _node_id(), "ray_gpu_ids": gpu_ids or "none"}
    if trial.get("skip"):
        tracking.log_trial(tracking_uri, run_id, {"skip_reason": trial["skip"]}, {"val_max_constraint": math.inf}, [],
                           {**tags, "skipped": trial["skip"]}, {}, {})
        return {"val_accuracy": math.nan, "val_max_constraint": math.inf, "skipped": 1.0}

    cfg = RunConfig(
        dataset=trial["dataset"], method=trial["method"], constraint=trial["constraint"],
        gamma=trial["gamma"] if trial["gamma"] is not None else 0.0, epsilon=trial["epsilon"] or 1.0, delta=trial["delta"],
        steps=trial.get("steps"), max_steps=trial["max_steps"], seed=trial["seed"], eval_every=trial["eval_every"], device=device,
        params={**trial["params"], **trial.get("calibrated", {})},
        preprocessing=trial.get("preprocessing", "public"), checkpoint=trial.get("checkpoint", "last"),
        selection_noise=trial.get("selection_noise", 50.0), selection_checkpoints=trial.get("selection_checkpoints", 5),
    )
    dataset = _dataset(trial["dataset"], cfg.split_seed, cfg.preprocessing)
    live = tracking.LiveMetrics(tracking_uri, run_id, flush_every_s, reused=reused)
    result = train(cfg, dataset=dataset, progress=lambda entry: live.add(history_points(entry)))
    live.flush()
    reported = result.reported
    metrics: dict[str, float] = {}
    for split in ("train", "val", "test"):
        metrics.update(_flat(f"{split}_", reported[split]))
        metrics.update(_flat(f"last_{split}_", result.last[split]))
    p = result.privacy
    metrics.update(epsilon_spent=p["epsilon_spent"], steps=result.steps, ms_per_step=result.timing["ms_per_step"],
                   reported_step=float(reported.get("step", result.steps)))
    if p.get("epsilon_separate_composition_reference") is not None:
        metrics["epsilon_separate_composition_reference"] = p["epsilon_separate_composition_reference"]
    params = {**run_params(result.config, p["private"]), **result.hyperparameters}
    for k, v in trial.get("calibrated", {}).items():  # calibrated, not searched: logged as such
        params.pop(k, None)
        params[f"calibrated.{k}"] = v
    if trial.get("steps") is not None:
        params.pop("run.steps", None)
        params["calibrated.steps"] = trial["steps"]
    params.update({f"privacy.{k}": v for k, v in p.items() if k != "outside_budget" and (not isinstance(v, float) or math.isfinite(v))})
    tags.update(checkpoint=cfg.checkpoint, checkpoint_note=reported["rule_note"], privacy_notion=str(p.get("notion")),
                preprocessing=cfg.preprocessing, outside_budget=" | ".join(p["outside_budget"]) or "none",
                method_style=",".join(get_method(cfg.method).style))
    with tempfile.TemporaryDirectory() as tmp:
        weights, weights_last = Path(tmp) / "weights.npz", Path(tmp) / "weights_last.npz"
        np.savez(weights, **result.reported_params)
        np.savez(weights_last, **result.final_params)
        columns = mlflow_model.feature_names_for(result.reported_params, dataset.feature_names,
                                                 tuple(f"{dataset.sensitive_attribute}={g}" for g in dataset.group_names))
        tracking.log_trial(
            tracking_uri, run_id, params, {k: v for k, v in metrics.items() if math.isfinite(v)}, [], tags,
            {"config.json": json.dumps({"trial": trial, "run_config": result.config, "hyperparameters": result.hyperparameters,
                                        "privacy": p}, indent=2, default=str)},
            {"weights.npz": weights, "weights_last.npz": weights_last},
            model=lambda: mlflow_model.log_model(tracking_uri, run_id, weights, columns, dataset.n_classes),
        )
    return {k: metrics[k] for k in ("val_accuracy", "val_max_constraint", "test_accuracy", "test_max_constraint", "epsilon_spent") if k in metrics}


def tune_trainable(config: dict, tracking_uri: str, experiment_id: str, parent_run_id: str, device: str, env: dict) -> None:
    """The Ray Tune function trainable."""
    import os

    from ray import tune

    os.environ.update(env)
    summary = execute_trial(config["trial"], tracking_uri, experiment_id, parent_run_id, device)
    tune.report({k: (v if math.isfinite(v) else -1.0) for k, v in summary.items()})
