"""`raco-bench report`: everything MLflow holds about a sweep, as files a paper can use.

The sweep is exported from MLflow as a study part (:mod:`raco_bench.report.export`), and everything drawn is drawn
from parts (:mod:`raco_bench.report.draw`), as ``raco-bench results`` draws a page from a study folder: there is one
way to draw a figure. Outputs in ``--out``:

* ``runs.csv``: the tidy table of every finished trial run used, with each run's health verdict (``health``);
* the figures and tables of :mod:`raco_bench.report.draw` (``pareto``, ``gap``, ``fnr``, ``worst_group_loss``,
  ``satisfaction`` as PDF and PNG; ``satisfaction.csv``/``.tex``, ``spending.csv``);
* ``walltime.{md,tex,csv}``: the latest `raco-bench bench walltime` table, when one was logged;
* ``throughput.md``: the latest `raco-bench bench throughput` table, when one was logged;
* ``audit.{md,csv,png,pdf}``: the latest `raco-bench audit` of each configuration, audited ε̂ beside the claimed ε;
* ``index.md`` linking it all, with notes (methods with no point meeting γ, substitutes, privacy notions).

With ``--results DIR`` the part is also written to ``DIR/parts/`` (replacing an earlier export of the same sweep)
and the page ``DIR`` is rebuilt from every part there (:func:`raco_bench.report.results_page.build_page`). The
``--out`` folder is also logged to MLflow as artifacts of the sweep's latest phase parent run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from raco_bench import tracking
from raco_bench.audit.records import AUDIT_EXPERIMENT, load_audits
from raco_bench.preflight import check_store
from raco_bench.progress import Progress
from raco_bench.records.throughput import read_throughput
from raco_bench.report import figures
from raco_bench.report.audits import write_audits
from raco_bench.report.draw import data_note, draw
from raco_bench.report.export import export_part
from raco_bench.report.load import ReportError, experiment_id, health_labels
from raco_bench.report.references import REFERENCE_COLUMNS, load_references
from raco_bench.report.results_page import build_page
from raco_bench.report.store_epsilon import store_line
from raco_bench.report.study import Study, write_part
from raco_bench.report.tables import WALLTIME_EXPERIMENT, load_walltime, markdown_table, write_walltime_tables

__all__ = ["REFERENCE_COLUMNS", "Report", "ReportError", "build_report", "data_note", "load_references"]


@dataclass
class Report:
    out: Path
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def build_report(experiment: str, tracking_uri: str | None, out: Path, references: Path | None = None,
                 walltime_experiment: str = WALLTIME_EXPERIMENT, log_to_mlflow: bool = True, sweep_id: str | None = None,
                 audit_experiment: str = AUDIT_EXPERIMENT, results: Path | None = None) -> Report:
    uri = tracking.resolve_tracking_uri(tracking_uri)
    check_store(uri, tracking.tracking_uri_source(tracking_uri)[1], experiment, write=log_to_mlflow, existing=True)
    progress = Progress("report", 5, every=0.0)
    part = export_part(uri, experiment, sweep_id)  # raises ReportError for an unknown experiment or no finished runs
    df = part.rows
    which = "" if sweep_id is not None else " (the one that trained last; --sweep-id picks another)"
    progress.advance(f"{len(df)} runs of sweep {part.sweep_id}{which} loaded from {uri}")
    dataset, constraint = str(df["dataset"].iloc[0]), str(df["constraint"].iloc[0])
    refs = load_references(references, {dataset}, constraint)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    runs_csv = out / "runs.csv"
    df.assign(health=health_labels(df.assign(max_steps=part.max_steps))).to_csv(runs_csv, index=False)  # each run's verdict
    report.files.append(runs_csv)
    drawn = draw(Study([part]), out, refs)
    report.files += drawn.files
    report.notes += drawn.notes
    progress.advance("figures and tables")

    wall = load_walltime(uri, walltime_experiment)
    if wall is not None:
        report.files += write_walltime_tables(wall, out)
    else:
        report.notes.append(f"no wall-time benchmark in experiment {walltime_experiment!r}; run `raco-bench bench walltime` to add the table.")
    throughput = read_throughput(uri)
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
    progress.advance("wall-time tables and index")
    if results is not None:
        write_part(results, part)
        if wall is not None and dataset in set(wall["dataset"]):  # the page keeps the store's bench table as data too
            for suffix in (".csv", ".md", ".tex"):
                shutil.copy2(out / f"walltime{suffix}", results / f"walltime{suffix}")
        report.files += build_page(results, references)
    progress.advance("results page" if results is not None else "no results page (--results)")
    if log_to_mlflow:
        _log(uri, experiment_id(uri, experiment), df, out)
    progress.advance("logged to MLflow" if log_to_mlflow else "not logged to MLflow (--no-mlflow)")
    return report


def _write_index(report: Report, experiment: str, uri: str, df: pd.DataFrame) -> None:
    counts = df.groupby(["method", "phase"]).size().rename("runs").reset_index()
    lines = [f"# Report: {experiment}", "", f"Tracking URI: `{uri}`; sweep `{df['sweep_id'].iloc[0]}`. Runs used: {len(df)} "
             "(tidy table: [runs.csv](runs.csv)).", "",
             figures.privacy_caption(df), "", store_line(uri, experiment, str(df["sweep_id"].iloc[0])), "", markdown_table(counts), "",
             "## Figures and tables", ""]
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
