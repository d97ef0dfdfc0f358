"""A results page (``raco-bench report --results DIR``): one study as the repository publishes it under ``results/``.

The page holds the sweep's figures (PNG, and PDF beside them), the tidy CSV of its phase-2 runs (for an
accounted sweep, its released models), the command that produced it, the hardware, the wall time and
the suite version (recorded by the sweep driver when it started: :func:`raco_bench.sweeps.runner.provenance`),
and the protocol's sizes, stated as reduced where they are below the papers' (200 configurations × 5
seeds, then 20 seeds).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from raco_bench import tracking

PAPER_PROTOCOL = {"n_configs": 200, "phase1_seeds": 5, "phase2_seeds": 20}
PROVENANCE = {"raco_bench.command": "Command", "raco_bench.hardware": "Hardware", "raco_bench.version": "Suite version"}


def sweep_parents(uri: str, exp_id: str, sweep_id: str) -> dict[int, object]:
    """The sweep's phase parent runs by phase."""
    runs = tracking.search_all(uri, [exp_id], f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.SWEEP_ID}` = '{sweep_id}'")
    return {int(r.data.tags.get(tracking.PHASE, "0")): r for r in runs}


def protocol_note(params: dict) -> str:
    """The protocol's sizes, "reduced" where they are below the papers' (empty when the sweep logged no sizes)."""
    try:
        sizes = {k: int(float(params[f"sweep.{k}"])) for k in PAPER_PROTOCOL}
    except KeyError:
        return ""
    if params.get("sweep.tuning") == "accounted":
        return (f"accounted tuning: E[K] = {params.get('sweep.tuning_mean')} configurations per search, "
                f"{params.get('sweep.tuning_repeats')} repetitions")
    text = f"{sizes['n_configs']} configurations × {sizes['phase1_seeds']} seeds, then {sizes['phase2_seeds']} fresh seeds"
    if any(sizes[k] < v for k, v in PAPER_PROTOCOL.items()):
        return f"reduced protocol: {text} (the papers: 200 × 5, then 20)"
    return f"the papers' protocol: {text}"


def _wall_time(parents: dict) -> str:
    seconds = max((float(r.data.metrics.get("seconds", 0.0)) for r in parents.values()), default=0.0)
    return f"{seconds / 60:.1f} min ({seconds:.0f} s, the sweep command from start to summary)" if seconds else "not recorded"


def write_results_page(report, uri: str, exp_id: str, df: pd.DataFrame, page: Path, caption: str,
                       references: pd.DataFrame | None = None, data_note: str = "") -> list[Path]:
    """Copy ``report``'s figures and tables into ``page`` and write its README.md; returns the files written.

    The page also lists the published points overlaid on its figures (``references``, with their sources) and,
    when the store holds a ``raco-bench bench walltime`` table that covers this dataset, that table."""
    page.mkdir(parents=True, exist_ok=True)
    parents = sweep_parents(uri, exp_id, str(df["sweep_id"].iloc[0]))
    first = parents.get(1)
    tags = first.data.tags if first is not None else {}
    params = first.data.params if first is not None else {}
    written = []
    for path in report.files:
        if path.suffix in (".png", ".pdf") or path.name in ("satisfaction.csv", "satisfaction.tex"):
            shutil.copy2(path, page / path.name)
            written.append(page / path.name)
    reported = df[df["phase"] == 2]
    csv = page / "phase2_runs.csv"
    reported.drop(columns=["run_id", "start_time"], errors="ignore").to_csv(csv, index=False)
    written.append(csv)
    dataset, constraint = df["dataset"].iloc[0], df["constraint"].iloc[0]
    lines = [f"# {dataset}, {constraint}", ""] + ([f"**{data_note}**", ""] if data_note else [])
    lines += [f"- **{label}:** `{tags[key]}`" if key == "raco_bench.command" else f"- **{label}:** {tags[key]}"
              for key, label in PROVENANCE.items() if key in tags]
    missing = [label for key, label in PROVENANCE.items() if key not in tags]
    if missing:
        lines.append(f"- not recorded by this sweep: {', '.join(missing).lower()}")
    lines += [f"- **Wall time:** {_wall_time(parents)}", f"- **Protocol:** {protocol_note(params) or 'not recorded'}",
              f"- **Sweep:** experiment `{df['experiment'].iloc[0]}`, sweep `{df['sweep_id'].iloc[0]}`; "
              f"{len(df)} configurations trained, {len(reported)} reported runs in [phase2_runs.csv](phase2_runs.csv)", "",
              caption.replace("\n", "  \n"), ""]
    for path in written:
        if path.suffix == ".png":
            lines += [f"## {path.stem}", "", f"![{path.stem}]({path.name}) ([PDF]({path.stem}.pdf))", ""]
    if (page / "satisfaction.csv").exists():
        sat = pd.read_csv(page / "satisfaction.csv").round(4)
        lines += ["## Selected configurations on test (satisfaction.csv)", "", sat.to_markdown(index=False), ""]
    if references is not None and not references.empty:
        shown = references.drop(columns=[c for c in ("dataset",) if c in references.columns]).fillna({"epsilon": "non-private / not stated"})
        lines += ["## Published points overlaid (☆ in the figures)", "", shown.to_markdown(index=False), ""]
    wall = next((p for p in report.files if p.name == "walltime.csv"), None)
    if wall is not None and dataset in set(pd.read_csv(wall)["dataset"]):
        for path in report.files:
            if path.stem == "walltime":
                shutil.copy2(path, page / path.name)
                written.append(page / path.name)
        lines += ["## Wall time per step (the store's latest `raco-bench bench walltime`)", "", (page / "walltime.md").read_text(), ""]
    notes = [n for n in report.notes if "raco-bench bench walltime" not in n and "raco-bench audit whitebox" not in n]  # report-wide hints
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    readme = page / "README.md"
    readme.write_text("\n".join(lines))
    written.append(readme)
    return written
