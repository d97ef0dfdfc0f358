"""Phase 1 in the MLflow UI: every phase-1 configuration (the mean over its seeds) as a finished run of its own,
created in bulk by the driver once the phase is recorded (docs/sweeps.md, "MLflow").

A configuration's run carries the searched hyperparameters as params (the same keys as its phase-2 runs), the mean
and standard deviation over its seeds of the validation and test metrics, and tags saying for which γ it was
selected. So a user sorts the phase-1 configurations by ``val_accuracy``, filters them by ``tags.method`` or
``tags.selected_for_gamma``, and plots one metric against another in the UI. Above ``limit`` configurations
(:data:`CONFIG_RUNS_LIMIT`) no run is created and the phase's parent says why: the pack tables (and
``raco-bench report``'s runs.csv) still hold every configuration.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from raco_bench import tracking
from raco_bench.sweeps.plan import Selection
from raco_bench.sweeps.spec import SweepSpec

# About 10 ms per run on a local SQLite store (four store calls): 10,000 configurations add under 2 minutes to a sweep that
# trains them for hours (`tests/test_mlflow_views.py` prints the rate; docs/sweeps.md, "MLflow: what the UI shows").
CONFIG_RUNS_LIMIT = 10_000
CONFIG_RUNS_TAG = "raco_bench.configuration_runs"  # on the phase-1 parent: how many were created, or why none
LABEL_TAGS = ("privacy_notion", "outside_budget", "randomness", "checkpoint", "preprocessing")  # as the seeds' runs tag them
AVERAGED = ("val_accuracy", "val_max_constraint", "test_accuracy", "test_max_constraint", "epsilon_spent")


def config_key(sweep_id: str, method: str, epsilon, gamma, config_id: int) -> str:
    return f"{sweep_id}|{method}|{tracking.eps_text(epsilon)}|{tracking.gamma_text(gamma)}|{config_id}"


def _stats(values: list[float]) -> tuple[float, float]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    return statistics.fmean(finite), (statistics.stdev(finite) if len(finite) > 1 else math.nan)


def configuration_records(spec: SweepSpec, parent_id: str, results: list[dict], selections: list[Selection],
                          dataset: tracking.DatasetRecord | None = None) -> dict[str, tracking.RunRecord]:
    """One record per phase-1 configuration, keyed by :func:`config_key`; ``dataset`` becomes each run's input."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["method"], r["epsilon"], r["gamma"], r["config_id"])].append(r)
    chosen: dict[tuple, list[float]] = defaultdict(list)
    for sel in selections:
        if sel.config_id is not None:
            chosen[(sel.method, sel.epsilon, sel.config_id)].append(sel.gamma)
    records = {}
    for (method, epsilon, gamma, config_id), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), str(kv[0][2]), kv[0][3])):
        key = config_key(spec.sweep_id, method, epsilon, gamma, config_id)
        won = sorted(g for g in chosen.get((method, epsilon, config_id), []) if gamma is None or g == gamma)
        metrics = {"seeds": float(len(rows))}
        for name in AVERAGED:
            mean, sd = _stats([r.get(name) for r in rows])
            metrics[name], metrics[f"{name}_sd"] = mean, sd
        metrics["val_error"] = 1.0 - metrics["val_accuracy"]
        metrics["test_error"] = 1.0 - metrics["test_accuracy"]
        selected = ",".join(tracking.gamma_text(g) for g in won) or "no"
        labels = {k: " | ".join(sorted({r["labels"][k] for r in rows if k in r.get("labels", {})})) for k in LABEL_TAGS}
        tags = {**{k: v for k, v in labels.items() if v},
                "mlflow.parentRunId": parent_id, tracking.KIND: "configuration", tracking.SWEEP_ID: spec.sweep_id, tracking.PHASE: "1",
                tracking.CONFIG_KEY: key, "dataset": spec.dataset, "constraint": spec.constraint, "method": method,
                "epsilon": str(epsilon), "gamma": tracking.gamma_text(gamma), "config_id": str(config_id), "selected_for_gamma": selected,
                "trained_with_gamma": "yes" if gamma is not None else "no", tracking.SOURCE_NAME: tracking.sweep_source(spec.experiment),
                tracking.DESCRIPTION: (f"Phase-1 configuration {config_id} of {method} at {tracking.eps_text(epsilon)}, "
                                       f"gamma={tracking.gamma_text(gamma)}: the mean (and _sd) over its {len(rows)} seeds. Selected for "
                                       f"gamma: {selected}. Seed-level rows: the packs' {tracking.PACK_TABLE}.")}
        name = f"{method} {tracking.eps_text(epsilon)} gamma={tracking.gamma_text(gamma)} config={config_id} (mean of {len(rows)} seeds)"
        records[key] = tracking.RunRecord(name, tags, dict(rows[0]["params"]), metrics, dataset)
    return records


def log_configuration_runs(uri: str, experiment_id: str, spec: SweepSpec, parent_id: str, results: list[dict], selections: list[Selection],
                           limit: int = CONFIG_RUNS_LIMIT, dataset: tracking.DatasetRecord | None = None) -> int:
    """Create the runs of the configurations that have none yet (a resumed sweep creates only the missing ones, and
    again any whose creation was interrupted); the number created. Above ``limit`` configurations none is created, and the parent run's tag says so."""
    records = configuration_records(spec, parent_id, results, selections, dataset)
    if len(records) > limit:
        tracking.set_tags(uri, parent_id, {CONFIG_RUNS_TAG: f"none: {len(records)} configurations exceed the limit of {limit} "
                                                            "(--config-runs-limit); every configuration is in the packs' tables"})
        return 0
    query = f"tags.`{tracking.KIND}` = 'configuration' and tags.`{tracking.SWEEP_ID}` = '{spec.sweep_id}'"
    held = set()
    for run in tracking.search_all(uri, [experiment_id], query):
        if run.info.status == "FINISHED":  # ended by the last call of its creation: complete
            held.add(run.data.tags.get(tracking.CONFIG_KEY))
        else:  # creation interrupted (the driver killed): created anew below
            tracking.delete_run(uri, run.info.run_id)
    missing = [record for key, record in records.items() if key not in held]
    tracking.create_finished_runs(uri, experiment_id, missing)
    tracking.set_tags(uri, parent_id, {CONFIG_RUNS_TAG: str(len(records))})
    return len(missing)
