"""A results page: one study as the repository publishes it under ``results/STUDY/``, drawn from its parts alone.

The page is its study's data (``parts/``, :mod:`raco_bench.report.study`) and what :func:`build_page` draws from it:
the figures (PNG, and PDF beside them), ``satisfaction.csv``/``.tex``, ``spending.csv``, ``phase2_runs.csv`` (every
reported run; for an accounted sweep, its released models) and a ``README.md`` with each part's command, hardware,
suite version, wall time, protocol (:mod:`raco_bench.report.protocol`) and store's ε, the bytes of the study's data, the
selected models on test, their T and ε spent, the published points overlaid and, when the page holds a
``walltime.csv`` that covers its dataset, the wall-time table. ``raco-bench report --results`` writes the part
and then builds the page; ``raco-bench results`` rebuilds it from the files alone.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from raco_bench.report import figures, health_evidence
from raco_bench.report.draw import Drawn, data_note, draw
from raco_bench.report.noise_floor import NOISE_FLOOR, measured_noise_floor, validation_floor
from raco_bench.report.protocol import protocol_note
from raco_bench.report.references import load_references
from raco_bench.report.study import PARTS, Part, Study, part_bytes

PROVENANCE = {"raco_bench.command": "Command", "raco_bench.hardware": "Hardware", "raco_bench.version": "Suite version"}
SCRIPT_ANYWHERE = re.compile(r"(?<![\w./-])\S*/(sweeps/[\w.-]+\.py)\b")  # a sweep script named by the absolute path it ran from


def shown_command(command: str) -> str:
    """A part's command as a reader runs it from the repository: a sweep script that an older suite recorded by the
    absolute path of its machine (``python /work/run_study/sweeps/adult.py``) named ``sweeps/adult.py``."""
    return SCRIPT_ANYWHERE.sub(r"\1", command)


def wall_time(seconds: float | None) -> str:
    return f"{seconds / 60:.1f} min ({seconds:.0f} s, the sweep command from start to summary)" if seconds else "not recorded"


def _eps(values) -> str:
    eps = sorted({float(e) for e in pd.Series(values).astype(float).fillna(float("inf"))})
    return ", ".join("∞" if e == float("inf") else f"{e:g}" for e in eps)


def _part_lines(page: Path, part: Part, rows: pd.DataFrame, superseded: list[tuple] = ()) -> list[str]:
    mine = rows[rows["sweep_id"] == part.sweep_id]
    pipelines = sorted(set(mine["pipeline"]) - {""})
    lines = [f"### Part `{part.sweep_id}` (experiment `{part.experiment}`)", ""]
    lines += [f"- **{label}:** `{shown_command(part.provenance[key])}`" if key == "raco_bench.command" else f"- **{label}:** {part.provenance[key]}"
              for key, label in PROVENANCE.items() if key in part.provenance]
    missing = [label for key, label in PROVENANCE.items() if key not in part.provenance]
    if missing:
        lines.append(f"- not recorded by this sweep: {', '.join(missing).lower()}")
    lines += [f"- **Wall time:** {wall_time(part.wall_seconds)}", f"- **Protocol:** {protocol_note(part.params) or 'not recorded'}",
              f"- **Methods:** {', '.join(sorted(set(mine['base_method'])))}; **ε:** {_eps(mine['epsilon'])}; "
              f"**pipeline:** {'; '.join(pipelines) or 'default (public preprocessing, last iterate, nothing outside the budget)'}",
              f"- **Data:** {len(mine)} configurations trained ({int((mine['phase'] == 2).sum())} reported runs); "
              f"[parts/{part.sweep_id}.csv.gz](parts/{part.sweep_id}.csv.gz) and [.json](parts/{part.sweep_id}.json), "
              f"{part_bytes(page, part.sweep_id):,} bytes", *store_lines(part), ""]
    if superseded:
        cells = ", ".join(f"{m} at ε = {_eps([e])}" for m, e, *_ in superseded)
        lines.insert(-1, f"- **Left out:** {cells}: searched again in the parts run as repeats, on which the cell rests (this part is from "
                         "before repeats; docs/results.md, \"Repeats and intervals\")")
    if part.params.get("sweep.schema"):  # a dataset of the user's own: which files, and their digest (docs/datasets.md)
        lines.insert(-1, f"- **Dataset files:** schema `{part.params['sweep.schema']}`, table `{part.params.get('sweep.data') or 'the one it names'}` "
                         f"(sha256 of both: `{part.params.get('sweep.files_digest', 'not recorded')}`)")
    return lines


def _figure(value) -> str:
    return "not computed" if value is None else "∞" if value == math.inf else f"{value:.4g}"


def store_lines(part: Part) -> list[str]:
    """What a reader of every run the part's sweep holds gets (docs/privacy.md, "The store's ε"), per dataset."""
    if not part.store_epsilon:
        return ["- **The store's ε:** not in this part (written before the suite stated it); `raco-bench report --results` "
                "writes it again with it"]
    lines = []
    for dataset, f in sorted(part.store_epsilon.items()):
        text = (f"- **The store's ε** (a reader of all {f['runs']} runs this sweep trained on {dataset}, at δ = {f['delta']:g}): "
                f"{_figure(f['epsilon'])}")
        if f["without_claim"]:
            text += (f", {f['without_claim']} runs having no record-level claim; **private runs only** (the other "
                     f"{f['runs'] - f['without_claim']}): {_figure(f['private_only'])}")
        text += (f"; had every run drawn its own batches: {_figure(f['own_batches'])}; largest per-run ε: {_figure(f['largest_run'])}; "
                 + ("**end to end**" if f["end_to_end"] else "**not end to end**"
                    + (f" (outside the budget, as the runs list it: {'; '.join(f['outside_budget'])})" if f["outside_budget"] else "")))
        lines.append(text)
    return lines


def _protocol_line(study: Study, rows: pd.DataFrame) -> str:
    """One protocol for the page, or each method's (from the parts it appears in) when they differ."""
    notes = {p.sweep_id: protocol_note(p.params) or "not recorded" for p in study.parts}
    if len(set(notes.values())) == 1:
        return f"- **Protocol:** {next(iter(notes.values()))}"
    per_method = rows.groupby("method")["sweep_id"].agg(lambda s: "; ".join(sorted({notes[i] for i in s})))
    return "- **Protocol per method:** " + "; ".join(f"{m}: {n}" for m, n in per_method.items())


def _spending_markdown(spending: pd.DataFrame, parts: bool) -> str:
    table = pd.DataFrame({
        "method": spending["method"], "ε": spending["epsilon"].map(lambda e: "∞" if e == float("inf") else f"{e:g}"),
        "γ": spending["gamma"].map("{:g}".format), "T (selected)": spending["T"].map("{:.0f}".format),
        "ε spent (selected)": spending["epsilon_spent"].map(lambda v: "" if pd.isna(v) else f"{v:.3g}"), "cap on T": spending["cap"],
        "phase-1 median T": spending["phase1_median_T"].map(lambda v: "" if pd.isna(v) else f"{v:.0f}"),
        "phase-1 median ε spent": spending["phase1_median_epsilon_spent"].map(lambda v: "" if pd.isna(v) else f"{v:.3g}"),
        "phase-1 configurations": spending["phase1_configs"].map(lambda v: "" if pd.isna(v) else f"{v:.0f}"),
        "capped": [f"**capped: spent ε = {s:.2g} of {e:g}**" if c else "" for s, e, c in
                   zip(spending["epsilon_spent"], spending["epsilon"], spending["capped"])],
    })
    if parts:
        table.insert(1, "part", spending["sweep_id"])
    return table.to_markdown(index=False)


def _floor_lines(floor: pd.DataFrame | None, gammas) -> list[str]:
    """The noise-floor section: the splits' floors and the γ at or below the validation floor."""
    head = [f"## Noise floor of the splits ({NOISE_FLOOR})", ""]
    if floor is None:
        return head + ["Not measured: the dataset was not available where this page was built (`raco-bench results` measures it "
                       "when `RACO_BENCH_DATA` holds it).", ""]
    val = validation_floor(floor)
    below = sorted(g for g in {float(g) for g in gammas if g == g} if g <= val)
    text = ("A classifier that predicts by a fair coin is fair by construction; on these splits its largest constraint value is "
            "the median below (90th percentile beside it) from sampling noise alone (docs/results.md, \"Noise floor\"). ")
    text += (f"**γ ∈ {{{', '.join(f'{g:g}' for g in below)}}} is at or below the validation floor**: whether a configuration meets it "
             "on validation is decided mostly by which rows the split holds, so selection keeps the lucky configurations or the "
             "constant predictor." if below else "Every γ of this study is above the validation floor." if not math.isnan(val)
             else "The file has no validation row, so no γ is named.")
    table = floor.drop(columns=["dataset", "constraint"]).rename(columns={"floor_median": "floor (median)", "floor_p90": "floor (90th pct.)"})
    return head + [text, "", table.to_markdown(index=False), ""]


def _evidence_lines(study: Study) -> list[str]:
    """The health-evidence section, where some part's rows did not record what the health rules read."""
    older = [p.sweep_id for p in study.parts if health_evidence.lacking(p.rows)]
    if not older:
        return []
    head = [f"## Health evidence ({health_evidence.EVIDENCE_FILE})", ""]
    text = (f"The health rules (docs/results.md, \"Health of a result\") read a model's test accuracy against the best constant "
            f"predictor's, the test rows and the expected passes T·B/n. {len(older)} of the {len(study.parts)} parts "
            f"({', '.join(older)}) were exported before runs recorded these. ")
    if study.evidence is None:
        return head + [text + "The dataset was not here when this page was built, so their rows are not judged by the constant "
                       "and few-steps rules (\"not checked\"); `raco-bench results` measures it when `RACO_BENCH_DATA` holds it.", ""]
    text += ("For their rows the constant predictor's test accuracy and the test rows are the test split's, which every repeat "
             "shares, and T·B/n divides each row's T and batch size by the training split's size, all from the table below "
             "(measured from the dataset once). The one-class rule reads the model's own predictions, which those parts did "
             "not keep: it is not applied to them, and each verdict says so.")
    rows = study.rows
    still = int((rows["test_constant_accuracy"].isna() | rows["passes"].isna()).sum())
    if still:  # a γ the table does not hold (the dataset was not here when it was added)
        text += f" {still} rows were trained at a γ the table does not hold: the constant and few-steps rules are not applied to them."
    table = study.evidence.drop(columns=["dataset", "constraint"]).rename(columns={"gamma": "γ trained with"})
    return head + [text, "", table.to_markdown(index=False), ""]


REPEATS_TEXT = (
    "Cells run in several repeats of the whole protocol (each repeat searches afresh, selects on its own resampled "
    "train/validation split under a fresh key, then trains its winner's phase-2 seeds; the test split is the same in every "
    "repeat). A cell's value is the mean over its repeats of the selected model's mean over its phase-2 runs, with the 95 % "
    "t interval over the repeats; the share of runs meeting γ has Wilson's interval widened by the repeats' design effect "
    "(docs/results.md, \"Repeats and intervals\"). A repeat without a model found no configuration that met γ on validation.")
PAIRED_TEXT = (
    "Each method against those its plugin compares it with, repeat by repeat (the same train/validation and test rows): the "
    "mean difference with its 95 % t interval over the repeats both have. A verdict is read from the interval alone: "
    "\"better\" or \"worse\" where it excludes 0, else \"no detectable difference at this size\" (a lower error is better; "
    "a larger share meeting γ is better).")


def _repeat_lines(page: Path, study: Study, drawn: Drawn) -> list[str]:
    """The repeats section (``repeats.csv``, ``paired.csv``) where some cell ran in more than one repeat."""
    from raco_bench.report.repeats import has_repeats, paired_cells, paired_markdown, repeat_cells, repeats_markdown

    if drawn.satisfaction.empty or not has_repeats(study.repeat_of, drawn.selections):
        return []
    cells = repeat_cells(drawn.rows, drawn.selections, drawn.satisfaction, study.repeat_of)
    paired = paired_cells(drawn.satisfaction, study.repeat_of)
    cells.to_csv(page / "repeats.csv", index=False)
    paired.to_csv(page / "paired.csv", index=False)
    drawn.files += [page / "repeats.csv", page / "paired.csv"]
    lines = ["## Repeats: the mean over repeats with its 95 % interval (repeats.csv)", "", REPEATS_TEXT, "", repeats_markdown(cells), ""]
    if not paired.empty:
        lines += ["## Paired comparisons and verdicts (paired.csv)", "", PAIRED_TEXT, "", paired_markdown(paired), ""]
    return lines


def write_readme(study: Study, page: Path, drawn: Drawn, references: pd.DataFrame | None, floor: pd.DataFrame | None) -> Path:
    """The page's README.md from its study, what :func:`~raco_bench.report.draw.draw` made of it and its noise floor."""
    rows = drawn.rows
    dataset, constraint = rows["dataset"].iloc[0], rows["constraint"].iloc[0]
    note = data_note(rows)
    total = sum(part_bytes(page, p.sweep_id) for p in study.parts)
    lines = [f"# {dataset}, {constraint}", ""] + ([f"**{note}**", ""] if note else [])
    lines += [f"- **Study data:** {len(study.parts)} part(s) in [{PARTS}/]({PARTS}/), {total:,} bytes in all (compressed tables and their "
              "metadata); `raco-bench results` rebuilds this page from them alone",
              _protocol_line(study, rows),
              f"- **Runs:** {len(rows)} configurations trained, {int((rows['phase'] == 2).sum())} reported runs in [phase2_runs.csv](phase2_runs.csv)",
              "", figures.privacy_caption(rows).replace("\n", "  \n"), "", "## Parts", ""]
    for part in study.parts:
        lines += _part_lines(page, part, rows, study.superseded.get(part.sweep_id, []))
    for path in drawn.files:
        if path.suffix == ".png":
            lines += [f"## {path.stem}", "", f"![{path.stem}]({path.name}) ([PDF]({path.stem}.pdf))", ""]
    lines += _repeat_lines(page, study, drawn)
    if not drawn.satisfaction.empty:
        several = len(study.parts) > 1  # then each row says its part (config ids are per part)
        sat = drawn.satisfaction.drop(columns=["steps", "epsilon_spent", "max_steps", "capped", "health_note"]
                                      + ([] if several else ["sweep_id"])).round(4)
        sat = sat.rename(columns={"sweep_id": "part"})
        lines += ["## Selected configurations on test (satisfaction.csv)", "", sat.to_markdown(index=False), ""]
        lines += ["## T and ε spent: the selected models and phase 1 (spending.csv)", "",
                  "Per method, ε and γ: the selected configuration's number of steps T and ε spent (means over its phase-2 runs); per method "
                  "and ε: the medians over every phase-1 configuration, and the sweep's cap on T (`sweep.max_steps`). **Capped**: T reached "
                  "the cap with less than 90 % of ε spent (ringed in the figures).", "", _spending_markdown(drawn.spending, several), ""]
    lines += _floor_lines(floor, rows["gamma"])
    lines += _evidence_lines(study)
    if references is not None and not references.empty:
        shown = references.drop(columns=[c for c in ("dataset",) if c in references.columns]).fillna({"epsilon": "non-private / not stated"})
        lines += ["## Published points overlaid (☆ in the figures whose x-axis is their quantity)", "", shown.to_markdown(index=False), ""]
    wall = page / "walltime.csv"
    if wall.is_file() and (page / "walltime.md").is_file() and dataset in set(pd.read_csv(wall)["dataset"]):
        lines += ["## Wall time per step (`raco-bench bench walltime`)", "", (page / "walltime.md").read_text(), ""]
    if drawn.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in drawn.notes] + [""]
    readme = page / "README.md"
    readme.write_text("\n".join(lines))
    return readme


def build_page(page: Path, references: Path | None = None) -> list[Path]:
    """(Re)build the page in ``page`` from its ``parts/`` alone: every figure and table, ``phase2_runs.csv`` and the
    README; ``references``: the published points to overlay. Returns the files written."""
    study = Study.read(page)
    rows = study.rows
    dataset, constraint = str(rows["dataset"].iloc[0]), str(rows["constraint"].iloc[0])
    files = study.parts[0].params if study.parts else {}  # a user's dataset: its schema and table as the sweep logged them
    schema, data = files.get("sweep.schema") or None, files.get("sweep.data") or None
    floor, measured = measured_noise_floor(page, dataset, constraint, schema, data, study.family.spec)
    study.evidence, evidence_files = health_evidence.measured(page, rows, schema, data, study.family.spec)  # for rows that lack it
    measured += evidence_files
    refs = load_references(references, set(rows["dataset"]), constraint)
    drawn = draw(study, page, refs)
    csv = page / "phase2_runs.csv"
    drawn.rows[drawn.rows["phase"] == 2].to_csv(csv, index=False)
    return drawn.files + [csv, write_readme(study, page, drawn, refs, floor)] + measured
