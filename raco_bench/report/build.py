"""`raco-bench report`: everything MLflow holds about a sweep, as files a paper can use.

Outputs in ``--out``:

* ``runs.csv``: the tidy table of every finished trial run used;
* ``pareto.{pdf,png}``: test error against the test constraint value (the largest of the constraint quantities), one
  panel per ε, one colour per method, non-dominated points joined, spread over phase-2 seeds (paper Fig. 2);
* ``satisfaction.{pdf,png,csv,tex}``: per target γ, the selected configuration's test constraint value and error with
  their spread against the line value = γ, and the share of runs meeting γ (Fig. 3), also as LaTeX;
* ``fnr.{pdf,png}`` for false-negative-rate sweeps: accuracy against FNR;
* ``worst_group_loss.{pdf,png}``: test error against the worst group's mean loss (bounded group loss), every method;
* ``walltime.{md,tex,csv}``: the latest `raco-bench bench walltime` table, when one was logged;
* ``audit.{md,csv,png,pdf}``: the latest `raco-bench audit` of each configuration, audited ε̂ beside the claimed ε;
* ``index.md`` linking it all, with notes (methods with no point meeting γ, substitutes, privacy notions).

The whole folder is also logged to MLflow as artifacts of the sweep's latest phase parent run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench import tracking
from raco_bench.audit.records import AUDIT_EXPERIMENT, load_audits
from raco_bench.benchmarks.throughput import load as load_throughput
from raco_bench.progress import Progress
from raco_bench.report import figures
from raco_bench.report.audits import write_audits
from raco_bench.report.load import ReportError, aggregate, experiment_id, load_runs
from raco_bench.report.results_page import protocol_note, sweep_parents, write_results_page
from raco_bench.report.tables import WALLTIME_EXPERIMENT, load_walltime, markdown_table, satisfaction_latex, write_walltime_tables

REFERENCE_COLUMNS = ("method", "dataset", "epsilon", "error", "constraint_value", "source")
OLD_REFERENCE_COLUMNS = {"violation": "constraint_value"}  # the name before one name per quantity (docs/results.md)


ACS_NOTE = ("Data: the 2017 1-Year Alabama 5,000-row ACS sample (folktables layout), a SUBSTITUTE for the paper's 2018 "
            "5-Year file: not comparable with the paper's numbers.")


def data_note(df: pd.DataFrame) -> str:
    """What a reader must know about the sweep's data before reading its numbers (the ACS sample is a substitute)."""
    return ACS_NOTE if any(str(d).startswith("acs") for d in df["dataset"].unique()) else ""


@dataclass
class Report:
    out: Path
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load_references(path: Path | None, datasets: set[str], constraint: str | None = None) -> pd.DataFrame | None:
    """Published points of ``datasets`` from a CSV in :data:`REFERENCE_COLUMNS`; an optional ``constraint`` column keeps
    only the rows of this sweep's constraint (an empty cell: any constraint). ε empty or inf: a non-private point."""
    if path is None:
        return None
    if not path.is_file():
        raise ReportError(f"reference-points file {path} does not exist")
    ref = pd.read_csv(path, comment="#")
    ref = ref.rename(columns={old: new for old, new in OLD_REFERENCE_COLUMNS.items() if new not in ref.columns})
    missing = [c for c in REFERENCE_COLUMNS if c not in ref.columns]
    if missing:
        raise ReportError(f"reference-points file {path} lacks column(s) {', '.join(missing)}; expected {', '.join(REFERENCE_COLUMNS)}")
    for column in ("error", "constraint_value"):
        values = pd.to_numeric(ref[column], errors="coerce")
        if values.isna().any() or ((values < 0) | (values > 1)).any():
            raise ReportError(f"reference-points file {path}: column {column!r} needs numbers in [0, 1] (a rate), got "
                              f"{ref.loc[values.isna() | (values < 0) | (values > 1), column].tolist()}; fix or remove those rows")
        ref[column] = values
    ref = ref[ref["dataset"].isin(datasets)].copy()
    if constraint is not None and "constraint" in ref.columns:
        ref = ref[ref["constraint"].isna() | (ref["constraint"] == constraint)]
    ref["epsilon"] = pd.to_numeric(ref["epsilon"], errors="coerce").replace([np.inf], np.nan)
    return ref


def _selections(uri: str, exp_id: str, df: pd.DataFrame) -> list[dict]:
    """The sweep's phase-1 winners (logged by the driver on the phase-2 parent run)."""
    sweep_id = df["sweep_id"].iloc[0]
    query = f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.PHASE}` = '2' and tags.`{tracking.SWEEP_ID}` = '{sweep_id}'"
    for p in tracking.search_all(uri, [exp_id], query):
        local = tracking.read_artifact(uri, p.info.run_id, "selected_configurations.json")
        if local is not None:  # an interrupted sweep has no selection yet
            return json.loads(local.read_text())
    return []


RELEASED_CONFIG = -1  # accounted tuning: the pseudo-configuration "the model the private search released"


def accounted_view(uri: str, exp_id: str, df: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """An accounted-tuning sweep as the report draws it: every run the searches trained stays phase 1 (the faint
    markers); each repetition's released model is added as a phase-2 row of configuration RELEASED_CONFIG at its γ,
    so that a point is the mean over repetitions of what a user of the private search gets."""
    from raco_bench.sweeps.runner import RELEASED_ARTIFACT

    sweep_id = df["sweep_id"].iloc[0]
    query = f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.PHASE}` = '1' and tags.`{tracking.SWEEP_ID}` = '{sweep_id}'"
    released = []
    for p in tracking.search_all(uri, [exp_id], query):
        local = tracking.read_artifact(uri, p.info.run_id, RELEASED_ARTIFACT)
        if local is not None:  # an interrupted sweep has released nothing yet
            released = json.loads(local.read_text())
            break
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


def satisfaction_rows(df: pd.DataFrame, selections: list[dict]) -> pd.DataFrame:
    rows = []
    phase2 = df[df["phase"] == 2]
    for sel in selections:
        if sel.get("config_id") is None:
            continue
        eps = sel["epsilon"]
        runs = phase2[(phase2["method"] == sel["method"]) & (phase2["config_id"] == sel["config_id"])
                      & ((phase2["epsilon"].isna()) if eps is None else (phase2["epsilon"] == eps))
                      & ((phase2["gamma"].isna()) | (phase2["gamma"] == sel["gamma"]))]
        if runs.empty:
            continue
        v, e = runs["test_max_constraint"], runs["test_error"]
        rows.append({"method": sel["method"], "epsilon": math.inf if eps is None else float(eps), "gamma": float(sel["gamma"]),
                     "config_id": sel["config_id"], "n_runs": len(runs), "test_max_constraint": v.mean(), "test_max_constraint_sd": v.std(),
                     "test_error": e.mean(), "test_error_sd": e.std(), "share_meeting": float((v <= sel["gamma"]).mean())})
    return pd.DataFrame(rows)


def build_report(experiment: str, tracking_uri: str | None, out: Path, references: Path | None = None,
                 walltime_experiment: str = WALLTIME_EXPERIMENT, log_to_mlflow: bool = True, sweep_id: str | None = None,
                 audit_experiment: str = AUDIT_EXPERIMENT, results: Path | None = None) -> Report:
    uri = tracking.resolve_tracking_uri(tracking_uri)
    tracking.require_existing_store(uri)
    tracking.check_reachable(uri)
    progress = Progress("report", 5, every=0.0)
    df = load_runs(uri, experiment, sweep_id)  # raises ReportError for an unknown experiment or no finished runs
    skipped = dict(df.attrs.get("skipped", {}))
    progress.advance(f"{len(df)} runs loaded from {uri}")
    refs = load_references(references, set(df["dataset"]), str(df["constraint"].iloc[0]))
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    exp_id = experiment_id(uri, experiment)
    dataset, constraint = df["dataset"].iloc[0], df["constraint"].iloc[0]
    parents = sweep_parents(uri, exp_id, str(df["sweep_id"].iloc[0]))
    protocol = protocol_note(parents[1].data.params) if 1 in parents else ""
    reduced = f" ({protocol})" if protocol.startswith("reduced") else ""
    if data_note(df):
        reduced += "\n[ACS 2017 1-Year AL 5,000-row sample: a substitute, not the paper's data]"

    accounted = bool((df["tuning"] == "accounted").any())
    if accounted:  # the released models of the private searches become the figure's points
        df, selections = accounted_view(uri, exp_id, df)
    else:
        selections = _selections(uri, exp_id, df)
    runs_csv = out / "runs.csv"
    df.to_csv(runs_csv, index=False)
    report.files.append(runs_csv)
    agg = aggregate(df)
    title = f"{dataset}, {constraint}: test error vs test constraint value" + reduced
    report.files += figures.tradeoff_figure(agg, df, out, "pareto", "test_max_constraint", "test_error", "test constraint value (largest over the constraints)",
                                            "test error", title, references=refs)
    if constraint == "false-negative-rate":
        report.files += figures.tradeoff_figure(agg, df, out, "fnr", "test_fnr", "test_accuracy", "test false-negative rate", "test accuracy",
                                                f"{dataset}: accuracy vs false-negative rate" + reduced, minimise_y=False, references=refs,
                                                reference_xy=lambda r: (r["constraint_value"], 1 - r["error"]))
    if agg["test_worst_group_loss"].notna().any():  # the bounded-group-loss family, for every method
        report.files += figures.tradeoff_figure(agg, df, out, "worst_group_loss", "test_worst_group_loss", "test_error",
                                                "test worst-group loss (largest mean cross-entropy of a group; log scale)", "test error",
                                                f"{dataset}: test error vs worst-group loss (bounded group loss)" + reduced, xscale="log")
    progress.advance("trade-off figures")

    for sel in selections:
        if sel.get("config_id") is None:
            eps = "∞ (non-private)" if sel["epsilon"] is None else sel["epsilon"]
            report.notes.append(f"{sel['method']} at ε = {eps}, γ = {sel['gamma']}: no configuration met γ on validation "
                                f"({sel.get('feasible_configs', '0')} feasible"
                                + (f"; {sel['failed_configs']} excluded because a phase-1 seed failed" if sel.get("failed_configs") else "")
                                + "); it has no point in the satisfaction plot.")
    for key, count in skipped.items():
        report.notes.append(f"{count} planned run(s) not trained, so not drawn: {key}.")
    sat = satisfaction_rows(df, selections)
    if not sat.empty:
        sat.to_csv(out / "satisfaction.csv", index=False)
        (out / "satisfaction.tex").write_text(satisfaction_latex(sat, f"{dataset}, {constraint}"))
        report.files += [out / "satisfaction.csv", out / "satisfaction.tex"]
        report.files += figures.satisfaction_figure(sat, df, out, "satisfaction", f"{dataset}, {constraint}: constraint satisfaction" + reduced)
    elif not selections:
        report.notes.append("no phase-2 selection is logged yet (sweep interrupted before phase 2?): no satisfaction plot.")
    progress.advance("satisfaction figure")

    wall = load_walltime(uri, walltime_experiment)
    if wall is not None:
        report.files += write_walltime_tables(wall, out)
    else:
        report.notes.append(f"no wall-time benchmark in experiment {walltime_experiment!r}; run `raco-bench bench walltime` to add the table.")
    throughput = load_throughput(uri)
    if throughput is not None:
        path = out / "throughput.md"
        cols = [c for c in ("pack_size", "batch_draws", "configurations", "seconds", "configs_per_hour", "mean_T", "step_ms_per_config", "eval_share")
                if c in throughput]
        path.write_text(f"Configurations per hour by pack size (hardware: {throughput['hardware'].iloc[0]}; `raco-bench bench throughput`).\n\n"
                        + markdown_table(throughput[cols].round(4)) + "\n")
        report.files.append(path)
    audits = load_audits(uri, audit_experiment)
    if audits is not None:
        report.files += write_audits(audits, out)
    else:
        report.notes.append(f"no privacy audit in experiment {audit_experiment!r}; run `raco-bench audit whitebox` to add one.")
    _write_index(report, experiment, uri, df)
    if results is not None:
        report.files += write_results_page(report, uri, exp_id, df, results, figures.privacy_caption(df), refs, data_note(df))
    progress.advance("wall-time tables and index")
    if log_to_mlflow:
        _log(uri, exp_id, df, out)
    progress.advance("logged to MLflow" if log_to_mlflow else "not logged to MLflow (--no-mlflow)")
    return report


def _write_index(report: Report, experiment: str, uri: str, df: pd.DataFrame) -> None:
    counts = df.groupby(["method", "phase"]).size().rename("runs").reset_index()
    lines = [f"# Report: {experiment}", "", f"Tracking URI: `{uri}`; sweep `{df['sweep_id'].iloc[0]}`. Runs used: {len(df)} "
             "(tidy table: [runs.csv](runs.csv)).", "",
             figures.privacy_caption(df), "", markdown_table(counts), "", "## Figures and tables", ""]
    for path in report.files:
        if path.suffix in (".png",):
            lines += [f"### {path.stem}", f"![{path.stem}]({path.name})", f"[PDF]({path.stem}.pdf)", ""]
        elif path.suffix in (".csv", ".md", ".tex"):
            lines.append(f"- [{path.name}]({path.name})")
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    note = data_note(df)
    if note:
        lines += ["", note]
    index = report.out / "index.md"
    index.write_text("\n".join(lines) + "\n")
    report.files.append(index)


def _log(uri: str, exp_id: str, df: pd.DataFrame, out: Path) -> None:
    sweep_id = df["sweep_id"].iloc[0]
    parents = tracking.search_all(uri, [exp_id], f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.SWEEP_ID}` = '{sweep_id}'",
                                  order_by=[f"tags.`{tracking.PHASE}` DESC"])
    if parents:
        tracking.log_artifacts(uri, parents[0].info.run_id, out, "report")
