"""Export one sweep from MLflow as a study part (:class:`raco_bench.report.study.Part`): the only reader of the store
that a results page depends on. Everything a page draws is in the part; the page itself is drawn from parts alone."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd

from raco_bench import tracking
from raco_bench.records.artifacts import RELEASED_ARTIFACT, SELECTIONS_ARTIFACT, STORE_ARTIFACT
from raco_bench.report.load import experiment_id, load_runs
from raco_bench.report.study import Part

PROVENANCE = ("raco_bench.command", "raco_bench.hardware", "raco_bench.version")
RELEASED_CONFIG = -1  # accounted tuning: the pseudo-configuration "the model the private search released"


def sweep_parents(uri: str, exp_id: str, sweep_id: str) -> dict[int, object]:
    """The sweep's phase parent runs by phase."""
    runs = tracking.search_all(uri, [exp_id], f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.SWEEP_ID}` = '{sweep_id}'")
    return {int(r.data.tags.get(tracking.PHASE, "0")): r for r in runs}


def _artifact(uri: str, parent, path: str) -> list[dict] | None:
    local = tracking.read_artifact(uri, parent.info.run_id, path) if parent is not None else None
    return json.loads(local.read_text()) if local is not None else None  # an interrupted sweep has none yet


def accounted_view(df: pd.DataFrame, released: list[dict]) -> tuple[pd.DataFrame, list[dict]]:
    """An accounted-tuning sweep as the report draws it: every run the searches trained stays phase 1 (the faint
    markers); each repetition's released model (``released``, the driver's artifact) is added as a phase-2 row of
    configuration RELEASED_CONFIG at its γ, so that a point is the mean over repetitions of what a user of the private
    search gets."""
    by_key = df.set_index("trial_key")
    rows, selections = [], []
    for rel in released:
        selections.append({"method": rel["method"], "epsilon": rel["epsilon"], "gamma": rel["gamma"],
                           "config_id": RELEASED_CONFIG if rel["trial_key"] else None, "feasible_configs": "0"})
        if rel["trial_key"] and rel["trial_key"] in by_key.index:
            row = by_key.loc[rel["trial_key"]].to_dict()
            rows.append({**row, "trial_key": rel["trial_key"], "phase": 2, "config_id": RELEASED_CONFIG, "gamma": rel["gamma"], "seed": rel["repeat"]})
    unique = {(s["method"], s["epsilon"], s["gamma"]): s for s in selections if s["config_id"] is not None}
    for s in selections:
        if s["config_id"] is None and (s["method"], s["epsilon"], s["gamma"]) not in unique:
            unique[(s["method"], s["epsilon"], s["gamma"])] = s
    return (pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True) if rows else df), list(unique.values())


def export_part(uri: str, experiment: str, sweep_id: str | None = None) -> Part:
    """One sweep of ``experiment`` (default: the one that trained last) as a part: its trained rows (for accounted tuning, the
    released models as phase-2 rows), the spec params and provenance its phase parents logged, the wall time, the
    selections (the driver's :data:`~raco_bench.records.artifacts.SELECTIONS_ARTIFACT`) and the skipped counts. The rows keep every column
    (``trial_key`` and the run ids too); writing the part drops what a page does not read."""
    df = load_runs(uri, experiment, sweep_id)  # raises ReportError for an unknown experiment or no finished runs
    sweep_id = str(df["sweep_id"].iloc[0])
    parents = sweep_parents(uri, experiment_id(uri, experiment), sweep_id)
    first = parents.get(1)
    if bool((df["tuning"] == "accounted").any()):
        df, selections = accounted_view(df, _artifact(uri, first, RELEASED_ARTIFACT) or [])
    else:
        selections = _artifact(uri, parents.get(2), SELECTIONS_ARTIFACT) or []
    logged = first if first is not None else parents.get(2)  # the spec params of a phase parent (both log them)
    params = dict(logged.data.params) if logged is not None else {}
    tags = first.data.tags if first is not None else {}
    seconds = max((float(r.data.metrics.get("seconds", 0.0)) for r in parents.values()), default=0.0)
    return Part(sweep_id, experiment, df, {k: str(v) for k, v in params.items() if k.startswith("sweep.")},
                {k: tags[k] for k in PROVENANCE if k in tags}, seconds or None, selections, dict(df.attrs.get("skipped", {})),
                store_figures(uri, experiment_id(uri, experiment), sweep_id, parents))


def store_figures(uri: str, exp_id: str, sweep_id: str, parents: dict[int, object]) -> dict[str, dict]:
    """Per dataset, the store's ε of the sweep's runs (:func:`raco_bench.sweeps.store_privacy.store_summary`): the record
    its finishing phase parent holds, or, for a sweep that recorded none with these figures (older, or interrupted), the
    figures computed now from its rows."""
    from raco_bench.records.results import read_results
    from raco_bench.sweeps.store_privacy import store_summary, sweep_store_epsilon

    parent = parents.get(2) or parents.get(1)
    record = _artifact(uri, parent, STORE_ARTIFACT) if parent is not None else None
    if record and all("private_only" in f and "end_to_end" in f for f in record.values()):
        return {d: store_summary(f) for d, f in record.items()}
    figures = sweep_store_epsilon(read_results(uri, exp_id, sweep_id))
    return {d: store_summary({**dataclasses.asdict(f), "end_to_end": f.end_to_end}) for d, f in figures.items()}
