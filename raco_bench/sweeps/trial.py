"""One sweep trial: a pack of configurations of one method, trained together and logged to MLflow exactly once.

A pack's MLflow run holds a table with a row per configuration (``configs.csv``), the evaluation
curves of every configuration (``curves.csv.gz``) and their parameters (``weights.npz``); phase-2
configurations also get a run each, with everything a single run has: params, the reported and
last-iterate metrics (``last_*``), step-indexed curves ``eval/<split>_<metric>`` streamed while the
pack trains (batched, :class:`raco_bench.tracking.LiveMetrics`), ``weights.npz`` /
``weights_last.npz`` and the reported model as a loadable MLflow pyfunc model with its signature
(:mod:`raco_bench.tracking.model`). Why this layout: docs/packs.md, "MLflow".

Every method of a sweep reports its model under the sweep's one checkpoint rule (``checkpoint``:
``last``, ``private`` or ``paper``, the last outside the budget and labelled), so a figure never
compares unlike rules. What a configuration read outside the budget is in its ``outside_budget``
column and tag.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from raco_bench import tracking
from raco_bench.constraints.gaps import gap_keys
from raco_bench.methods import get_method
from raco_bench.tracking import model as mlflow_model
from raco_bench.training.config import RunConfig, recorded_settings, run_fields
from raco_bench.training.health import passes

if TYPE_CHECKING:
    from raco_bench.sweeps.plan import Trial



def metric_keys() -> tuple[str, ...]:
    """The metrics a run records per split: the evaluation's, with every registered gap metric (raco_bench.constraints.gaps)."""
    return ("accuracy", "error", "max_constraint", "max_violation", *gap_keys(), "worst_group_loss", "satisfied", "top_class_share")


def curve_keys() -> tuple[str, ...]:
    """The metrics a run records as step-indexed curves per split."""
    return ("accuracy", "max_constraint", *gap_keys())


HEALTH, HEALTH_NOTE = "health", "health_note"  # the reported model's verdict (raco_bench.training.health): a tag, a column


@lru_cache(maxsize=4)
def _dataset(name: str, split_seed: int, preprocessing: str, schema: str | None = None, data: str | None = None, files_digest: str = "",
             validation_split: int = 0):
    """The pack's dataset; a user's files are checked against the digest the sweep started with (``files_digest``)."""
    from raco_bench.data import load_dataset
    from raco_bench.data.catalog import files_digest as digest_of

    if schema is not None and files_digest and digest_of(schema, data) != files_digest:
        raise ValueError(f"the schema {schema} or its table {data or '(named by the schema)'} changed since the sweep started; restore them, "
                         "or start a new sweep on the new files (a new sweep id)")
    return load_dataset(name, seed=split_seed, preprocessing=preprocessing, schema=schema, data=data,
                        validation_split=validation_split)


NOT_DIAGNOSTICS = {"step", "total", "train", "val", "test"}
def run_params(config: dict, private: bool) -> dict:
    """The run's settings as MLflow params ``run.<name>``: those RunConfig says a run records (a non-private run logs no
    privacy budget, selection settings appear only where the checkpoint rule uses them, a user's files and a custom
    constraint where set; :func:`raco_bench.training.config.recorded_settings`)."""
    return {f"run.{k}": v for k, v in recorded_settings(config, private).items()}


def _flat(prefix: str, block: dict) -> dict[str, float]:
    out = {}
    for k in metric_keys():
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


def history_points(entry: dict) -> list[tracking.Point]:
    """One evaluation's step-indexed points: ``eval/<split>_<metric>`` and whatever the method's report() returns as ``eval/<name>``."""
    step = entry["step"]
    points = [(f"eval/{split}_{k}", float(entry[split][k]), step) for split in ("train", "val", "test") if split in entry
              for k in curve_keys() if k in entry[split]]
    points += [(f"eval/{k}", float(v), step) for k, v in entry.items() if k not in NOT_DIAGNOSTICS and isinstance(v, (int, float))]
    return points


def run_config(trial: Trial, device: str) -> RunConfig:
    """The run a trial carries, on ``device``: its RunConfig fields (a trial that does not name one takes RunConfig's
    default), a non-private method's ε as 1 (unused) and a γ-free method's γ as 0, the calibrated values with its hyperparameters."""
    return RunConfig.from_record(trial, device=device, gamma=trial["gamma"] if trial["gamma"] is not None else 0.0,
                                 epsilon=trial["epsilon"] or 1.0, params={**trial["params"], **trial.get("calibrated", {})})


def outside_budget(trial: Trial, privacy: dict) -> list[str]:
    """What the run lists outside the budget: the pipeline's labels, and under accounted tuning what its plan adds (the
    store holds more than the released model; a reproducible search; docs/privacy.md, "Threat model")."""
    return list(privacy["outside_budget"]) + list(trial.get("tuning_outside_budget", []))


def trial_outputs(trial: Trial, result) -> tuple[dict[str, float], dict, dict[str, str]]:
    """(metrics, params, tags) of one trained configuration, as its MLflow run and its pack-table row record them."""
    reported = result.reported
    metrics: dict[str, float] = {}
    for split in ("train", "val", "test"):
        if split in reported:  # the training split only where the run releases its exact metrics (labelled)
            metrics.update(_flat(f"{split}_", reported[split]))
            metrics.update(_flat(f"last_{split}_", result.last[split]))
    p = result.privacy
    metrics.update(epsilon_spent=p["epsilon_spent"], steps=result.steps, ms_per_step=result.timing["ms_per_step"], eval_s=result.timing.get("eval_s", math.nan),
                   reported_step=float(reported.get("step", result.steps)))
    # what the health verdict is judged from, so that a report judges a selected configuration's mean by the same rules
    ds = result.dataset
    metrics.update(test_constant_accuracy=ds["constant_accuracy"]["test"], val_constant_accuracy=ds["constant_accuracy"]["val"],
                   test_rows=float(ds["n_test"]), passes=passes(result.steps, result.hyperparameters.get("batch_size"), ds["n_train"]))
    noisy = reported.get("noisy_validation")
    if not noisy and result.selection_releases:  # no checkpoint met the constraints: the last iterate, released at step T too
        noisy = next((e for e in result.selection_releases if e["step"] == reported.get("step", result.steps)), None)
    if noisy:  # checkpoint=private: the selected checkpoint's released noisy validation scores (what accounted tuning selects on)
        metrics.update(noisy_val_accuracy=float(noisy["noisy_val_accuracy"]), noisy_val_max_constraint=float(noisy["noisy_val_max_constraint"]))
    for key in ("epsilon_end_to_end", "epsilon_end_to_end_rdp"):  # accounted tuning: the claim (privacy profiles), the RDP figure beside it
        if trial.get(key) is not None:
            metrics[key] = float(trial[key])
    if p.get("epsilon_separate_composition_reference") is not None:
        metrics["epsilon_separate_composition_reference"] = p["epsilon_separate_composition_reference"]
    params = {**run_params(result.config, p["private"]), **result.hyperparameters}
    if not get_method(result.config["method"]).gamma_is_input:
        params.pop("run.gamma", None)  # trained without γ: its γ is the one it is selected for (tag gamma, param selection.gamma)
    for k, v in trial.get("calibrated", {}).items():  # calibrated, not searched: logged as such
        params.pop(k, None)
        params[f"calibrated.{k}"] = v
    if trial.get("steps") is not None:
        params.pop("run.steps", None)
        params["calibrated.steps"] = trial["steps"]
    params.update({f"privacy.{k}": v for k, v in p.items() if k != "outside_budget" and (not isinstance(v, float) or math.isfinite(v))})
    cfg = result.config
    tags = {"checkpoint": cfg["checkpoint"], "checkpoint_note": reported["rule_note"], "privacy_notion": str(p.get("notion")),
            "randomness": cfg["randomness"],
            "preprocessing": cfg["preprocessing"], "outside_budget": " | ".join(outside_budget(trial, p)) or "none",
            "method_style": ",".join(get_method(cfg["method"]).style), HEALTH: result.health["verdict"], HEALTH_NOTE: result.health["text"]}
    return metrics, params, tags


def table_row(trial: Trial, run_id: str, metrics: dict[str, float] | None = None, tags: dict[str, str] | None = None) -> dict:
    """A configuration's row in its pack's table (``configs.csv``): its identity, its run's column settings as RunConfig
    records them (:func:`raco_bench.training.config.recorded_settings`), its tags and its metrics."""
    from raco_bench.sweeps.plan import PlannedTrial

    row = {k: trial.get(k) for k in PlannedTrial.__annotations__}
    defaults = RunConfig()  # the column settings: selection ones under checkpoint=private, a custom constraint and schema where set
    row.update(recorded_settings({k: trial.get(k, getattr(defaults, k)) for k in run_fields("column")}))
    row["tuning"] = trial.get("tuning", "not-accounted")
    if row["tuning"] == "accounted":
        row.update(repeat=trial["repeat"], tuning_note=trial.get("tuning_note", ""))  # never K: the claim needs it secret
        if trial.get("epsilon_end_to_end") is not None:
            row["epsilon_end_to_end"] = trial["epsilon_end_to_end"]
    row.update(params=json.dumps(trial.get("params", {}), sort_keys=True), calibrated=json.dumps(trial.get("calibrated", {}), sort_keys=True),
               skipped=trial.get("skip", ""), run_id=run_id)
    row.update(tags or {})
    row.update({k: v for k, v in (metrics or {}).items() if math.isfinite(v)})
    return row


@dataclass
class ChildRun:
    """A configuration's own MLflow run (phase-2 configurations): opened before training so that its curves
    stream while the pack trains; ``done`` when an earlier attempt completed it (then nothing is logged again).
    ``gamma`` is the γ it is selected for; ``view_of`` names the trained run when this one repeats it under another γ."""

    run_id: str
    done: bool
    live: tracking.LiveMetrics | None
    gamma: float | None = None
    view_of: str = ""

    @staticmethod
    def open(trial: Trial, uri: str, experiment_id: str, parent_run_id: str, flush_every_s: float, key_id: str | None = None) -> list["ChildRun"]:
        """The runs of one configuration: one per γ it is selected for (``selected_gammas``, several for a γ-free method
        that won at several γ; the first holds the training, the others are views of it), else one at its own γ.

        Views are closed before the trained run (``execute_pack``), so a complete trained run has complete views; when
        the trained run is logged again (a killed attempt), a complete view of another key is logged again too, so a view
        never holds other results than its trained run."""
        runs: list[ChildRun] = []
        for g in trial.get("selected_gammas") or [trial["gamma"]]:
            view_of = runs[0].run_id if runs else ""
            redo = bool(runs) and not runs[0].done
            run_id, done, reused = tracking.get_or_create_trial_run(uri, experiment_id, parent_run_id, trial, key_id, gamma=g, view_of=view_of,
                                                                    redo_complete=redo)
            live = None if done is not None else tracking.LiveMetrics(uri, run_id, flush_every_s, reused=reused)
            runs.append(ChildRun(run_id, done is not None, live, g, view_of))
        return runs

    def add(self, points: list[tracking.Point]) -> None:
        if self.live is not None:
            self.live.add(points)

    def close(self, trial: Trial, result, metrics, params, tags, uri: str, dataset) -> None:
        """Everything a single run has: params, metrics, tags, config, weights, the dataset input and the MLflow model."""
        if self.done:
            return
        self.live.flush()
        if self.gamma is not None:
            params = {**params, "selection.gamma": self.gamma}
        log_dataset_input(uri, self.run_id, dataset)
        method = get_method(result.config["method"])
        with tempfile.TemporaryDirectory() as tmp:
            weights, weights_last = Path(tmp) / "weights.npz", Path(tmp) / "weights_last.npz"
            np.savez(weights, **result.reported_params)
            np.savez(weights_last, **result.final_params)
            columns = mlflow_model.feature_names_for(result.reported_params, dataset.feature_names,
                                                     tuple(f"{dataset.sensitive_attribute}={g}" for g in dataset.group_names))
            source = tracking.sweep_source(trial.get("experiment", "")) if trial.get("sweep_id") else "raco-bench train"
            tracking.log_trial(
                uri, self.run_id, params, {k: v for k, v in metrics.items() if math.isfinite(v)}, tags,
                {"config.json": json.dumps({"trial": trial, "run_config": result.config, "hyperparameters": result.hyperparameters,
                                            "privacy": result.privacy}, indent=2, default=str)},
                {"weights.npz": weights, "weights_last.npz": weights_last},
                model=(lambda: mlflow_model.log_model(uri, self.run_id, weights, columns, dataset.n_classes, name=result.config["method"],
                                                      tags={tracking.SOURCE_NAME: source, "outside_budget": tags.get("outside_budget", "")}))
                if method.pyfunc_model else None,
            )


def dataset_record(dataset) -> tracking.DatasetRecord:
    """A loaded dataset as the tracking store records it (name, digest, source, split sizes): docs/sweeps.md, "MLflow"."""
    from raco_bench.data.catalog import provenance

    digest, source, profile = provenance(dataset)
    return tracking.DatasetRecord(dataset.name, digest, source, profile, tuple(dataset.feature_names))


def log_dataset_input(uri: str, run_id: str, dataset) -> None:
    """The run's dataset input; a user's dataset also tags the run with its schema file, its table and their sha256, and the
    data's notes (values clipped to their range on the validation and test rows) are a tag too."""
    tracking.log_dataset(uri, run_id, dataset_record(dataset))
    tags = {f"dataset.{k}": str(v) for k, v in dataset.origin.items() if k in ("schema", "schema_sha256", "table", "table_sha256")} \
        if "table" in dataset.origin else {}
    if dataset.data_notes:
        tags["dataset.notes"] = " | ".join(dataset.data_notes)[:4900]
    if tags:
        tracking.set_tags(uri, run_id, tags)


TRAIN_DESCRIPTION = ("Runs of raco-bench train, one per command, named like 'raco-dp eps=1 gamma=0.05 seed=0' (method, ε, γ, seed): "
                     "params, final and step-indexed metrics, the health verdict (tag health), weights and the reported model (docs/results.md).")


def log_single_run(uri: str, experiment: str, result, dataset, key_id: str | None = None) -> str:
    """Log one `raco-bench train` run as a sweep logs a phase-2 configuration: params, final metrics, tags, step-indexed
    curves, config.json, weights and the reported model as a pyfunc model. Returns the run id."""
    cfg = result.config
    trial = {"sweep_id": "", "phase": 0, "trial_key": "", "dataset": cfg["dataset"], "method": cfg["method"], "constraint": cfg["constraint"],
             "epsilon": cfg["epsilon"] if result.privacy["private"] else None, "gamma": cfg["gamma"], "config_id": "", "seed": cfg["seed"]}
    metrics, params, tags = trial_outputs(trial, result)
    gamma = cfg["gamma"] if get_method(cfg["method"]).gamma_is_input else None
    tags.update({tracking.KIND: "train", "method": cfg["method"], "dataset": cfg["dataset"], "constraint": cfg["constraint"],
                 "epsilon": str(trial["epsilon"]), "gamma": tracking.gamma_text(gamma), "seed": str(cfg["seed"]),
                 tracking.SOURCE_NAME: "raco-bench train",
                 tracking.DESCRIPTION: f"raco-bench train: {cfg['method']} on {cfg['dataset']} ({cfg['constraint']}), "
                                       f"{tracking.eps_text(trial['epsilon'])}, gamma={tracking.gamma_text(gamma)}, seed {cfg['seed']}.",
                 **({tracking.KEY_ID: key_id} if key_id else {})})  # runs under one key file share this fingerprint
    exp = tracking.get_or_create_experiment(uri, experiment, TRAIN_DESCRIPTION)
    name = f"{cfg['method']} {tracking.eps_text(trial['epsilon'])} gamma={tracking.gamma_text(gamma)} seed={cfg['seed']}"
    run_id = tracking.create_run(uri, exp, name, tags)
    live = tracking.LiveMetrics(uri, run_id, flush_every_s=float("inf"))
    live.add([p for entry in result.history for p in history_points(entry)])
    live.flush()
    ChildRun(run_id, False, live).close(trial, result, metrics, params, tags, uri, dataset)
    return run_id


def device_pack_size(runs: list, dataset, device: str) -> int | None:
    """The most configurations one pack of ``runs`` takes on a CUDA ``device``: the memory model's largest pack
    (their widest expected batch, their most evaluations) in the device's free memory, read now, on the device the
    trial landed on (docs/packs.md, "The GPU path"); None on a CPU, where the sweep sized the pack."""
    from raco_bench.training.pack_memory import DataShape, device_free_memory, evaluations_of, largest_pack_on_device

    free = device_free_memory(device)
    if free is None or not runs:
        return None
    batch = max(float(getattr(r.ctx.hyper, "batch_size", 0) or 0) for r in runs) or float(len(dataset.train))
    evaluations = max(evaluations_of(r.ctx.steps, r.ctx.config.eval_every, r.ctx.config.selection.count if r.ctx.config.selection else 0)
                      for r in runs)
    return largest_pack_on_device(len(runs), DataShape.of(dataset), batch, evaluations, free)


def execute_pack(pack: dict, tracking_uri: str, experiment_id: str, parent_run_id: str, device: str = "cpu",
                 flush_every_s: float = 10.0, key: bytes | None = None, checkpoint=None) -> dict:
    """Train and log one pack (its configurations in lockstep where a batched engine exists, see
    :mod:`raco_bench.packs`); a pack already complete in MLflow is returned without retraining.

    The pack's run holds ``configs.csv`` (a row per configuration: trial, tags, reported and last-iterate
    metrics), ``curves.csv.gz`` (every configuration's evaluation curve) and ``weights.npz`` (reported and
    last parameters per configuration). While it trains it streams ``pack/*`` curves (the step and the best
    validation accuracy among the configurations evaluated there). With ``child_runs`` (phase 2) every
    configuration also gets its own run with everything a single run has, its MLflow model included.

    ``key`` is the sweep's secret key (``randomness=secret``): every configuration of the pack draws from it, each
    from its own stream. It reaches the trial through Ray's object store and is written nowhere.

    ``checkpoint`` (a :class:`raco_bench.training.pack.PackCheckpoint`) saves the pack's state while it trains and holds the
    state an earlier attempt saved: a retried pack continues from there and ends as an uninterrupted one.
    """
    import pandas as pd
    import torch

    from raco_bench.training.loop import prepare_run
    from raco_bench.training.pack import train_runs

    torch.set_num_threads(1)  # one CPU per trial
    first = pack["members"][0]
    defaults = run_config(first, "cpu")  # the pack's shared settings, RunConfig's defaults where the trial says nothing
    source = pack_source(defaults.randomness, key)
    key_id = tracking.key_id(source.secret)
    run_id, done = tracking.get_or_create_pack_run(tracking_uri, experiment_id, parent_run_id, pack, key_id)
    if done is not None:
        return pack_summary(tracking.pack_tables(tracking_uri, [done]))
    resumed = checkpoint is not None and checkpoint.restored is not None
    tracking.set_tags(tracking_uri, run_id, {"worker_pid": str(os.getpid()), "attempt_resumed_from_checkpoint": "yes" if resumed else "no"})
    device, gpu_ids = _device(device)
    env_tags = {"device": device, "ray_node_id": _node_id(), "ray_gpu_ids": gpu_ids or "none"}
    members = pack["members"]
    trained = [t for t in members if not t.get("skip")]
    cfgs = [run_config(t, device) for t in trained]
    dataset = _dataset(first["dataset"], defaults.split_seed, defaults.preprocessing, defaults.schema, defaults.data, first.get("files_digest", ""),
                       defaults.validation_split)
    runs = [prepare_run(cfg, dataset, source=source) for cfg in cfgs]
    log_dataset_input(tracking_uri, run_id, dataset)
    live = tracking.LiveMetrics(tracking_uri, run_id, flush_every_s)
    children = [ChildRun.open(t, tracking_uri, experiment_id, parent_run_id, flush_every_s, key_id) for t in trained] if pack.get("child_runs") else []
    best: dict[int, float] = {}

    def progress(k: int, entry: dict) -> None:
        step = entry["step"]
        if entry["val"]["accuracy"] > best.get(step, -1.0):
            best[step] = entry["val"]["accuracy"]
            live.add([("pack/best_val_accuracy", best[step], step)])
        if children:
            points = history_points(entry)
            for child in children[k]:
                child.add(points)

    results = train_runs(runs, progress, checkpoint, max_pack=device_pack_size(runs, dataset, device))
    live.flush()
    rows, curves, arrays = [], [], {}
    for t in members:
        if t.get("skip"):
            rows.append(table_row(t, run_id, {"val_max_constraint": math.inf}, {"skipped": t["skip"]}))
    for k, (t, result) in enumerate(zip(trained, results)):
        metrics, params, tags = trial_outputs(t, result)
        tags.update(env_tags, **{"raco_bench.trial": json.dumps(t, sort_keys=True)})
        for child in reversed(children[k]) if children else []:  # views first: the trained run completes last
            child.close(t, result, metrics, params, tags, tracking_uri, dataset)  # a view's view_of tag is set when it is created
        row_tags = {name: value for name, value in tags.items() if name != "raco_bench.trial"}
        row_tags.update(batch_stream=_stream_text(runs[k].ctx.batch_stream_id), key_id=key_id)  # the batches it drew: the store's ε
        rows.append(table_row(t, children[k][0].run_id if children else run_id, metrics, row_tags))
        curves += [(t["trial_key"], key, value, step) for entry in result.history for key, value, step in history_points(entry)]
        arrays.update({f"{t['trial_key']}/reported/{k}": v for k, v in result.reported_params.items()})
        arrays.update({f"{t['trial_key']}/last/{k}": v for k, v in result.final_params.items()})
    table = pd.DataFrame(rows)
    with tempfile.TemporaryDirectory() as tmp:
        table.to_csv(Path(tmp) / tracking.PACK_TABLE, index=False)
        pd.DataFrame(curves, columns=["trial_key", "metric", "value", "step"]).to_csv(  # gzip's fastest level: 2.0 → 1.3 s, 17 % larger,
            Path(tmp) / "curves.csv.gz", index=False, compression={"method": "gzip", "compresslevel": 1})  # for 380,000 points
        np.savez_compressed(Path(tmp) / "weights.npz", **arrays)
        summary = pack_summary(table)
        tracking.log_trial(tracking_uri, run_id, {"configurations": len(members), "method": pack["method"]},
                           {f"pack/{k}": v for k, v in summary.items() if isinstance(v, float) and math.isfinite(v)},
                           {**env_tags, "outside_budget": rows[0].get("outside_budget", "none") if rows else "none"}, {},
                           {name: Path(tmp) / name for name in (tracking.PACK_TABLE, "curves.csv.gz", "weights.npz")})
    return summary


def _stream_text(stream: int | None) -> str:
    """The batch stream a configuration drew its Poisson batches from, as its row records it (empty: its own stream)."""
    return "" if stream is None else f"batches-{stream & (2**64 - 1):016x}"


def pack_summary(table) -> dict:
    """What a pack reports to Ray Tune and the console: its size, its best validation accuracy, and each member's
    validation accuracy and constraint value (the console picks the best feasible ones from these)."""
    out = {"configurations": float(len(table))}
    if "val_accuracy" in table and len(table):
        out["val_accuracy_best"] = float(table["val_accuracy"].max())
        cols = [c for c in ("method", "epsilon", "gamma", "config_id", "seed", "val_accuracy", "val_max_constraint") if c in table]
        out["members"] = table[cols].to_json(orient="records")
    return out


def pack_source(randomness: str, key: bytes | None):
    """The word source of a pack: the sweep's secret key, or the reproducible generator."""
    from raco_bench.privacy.counter_rng import REPRODUCIBLE, Keystream

    if randomness == "reproducible":
        return REPRODUCIBLE
    if key is None:
        raise ValueError("a pack with randomness=secret needs the sweep's key (execute_pack(..., key=...))")
    return Keystream(key)


def tune_checkpoint(every_s: float):
    """A pack checkpoint in Ray Tune's storage: saved with ``tune.report(..., checkpoint=...)``, found by a retried
    attempt of the same trial with ``tune.get_checkpoint()`` (a worker killed for memory or a lost node)."""
    import torch
    from ray import tune

    from raco_bench.training.pack import PackCheckpoint

    restored = None
    found = tune.get_checkpoint()
    if found is not None:
        with found.as_directory() as folder:
            restored = torch.load(Path(folder) / PACK_STATE, weights_only=False)  # written by this trial's earlier attempt

    def save(state: dict) -> None:
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state, Path(folder) / PACK_STATE)
            tune.report({"checkpoint_saved": 1.0}, checkpoint=tune.Checkpoint.from_directory(folder))

    return PackCheckpoint(save, restored, every_s)


PACK_STATE = "pack_state.pt"


def tune_trainable(config: dict, tracking_uri: str, experiment_id: str, parent_run_id: str, device: str, env: dict,
                   key: bytes | None = None, checkpoint_every_s: float = 60.0) -> None:
    """The Ray Tune function trainable: one trial is one pack. ``key`` (secret randomness) comes through
    ``tune.with_parameters``, i.e. Ray's object store, never through the trial's config (which Tune writes to disk).
    The last report says ``recorded``: the pack's configurations are in MLflow (what the console counts)."""
    from ray import tune

    os.environ.update(env)
    summary = execute_pack(config["pack"], tracking_uri, experiment_id, parent_run_id, device, key=key,
                           checkpoint=tune_checkpoint(checkpoint_every_s))
    tune.report({**{k: (v if not isinstance(v, float) or math.isfinite(v) else -1.0) for k, v in summary.items()}, "recorded": 1.0})
