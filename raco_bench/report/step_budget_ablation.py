"""Which parametrisation of the step budget wins: σ searched with T from the accountant, or T searched with σ calibrated
(docs/sweeps.md, "Step budget"; docs/results.md, "Step-budget ablation").

One sweep per parametrisation and dataset, the same search otherwise. The page compares, per (dataset, ε, γ), the
selected configuration's phase-2 test error and constraint value (mean ± sd over its fresh seeds, and the share of
runs meeting γ), its T and ε spent, and the phase-1 medians of T and ε spent. Like the search comparison, it is drawn
from an exported table alone:

    python -m raco_bench.report.step_budget_ablation export --tracking-uri URI --experiment NAME [...] --out DIR
    python -m raco_bench.report.step_budget_ablation page DIR
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

ROWS = "runs.csv.gz"  # every phase-1 and phase-2 row of the compared sweeps (the columns below)
KEEP = ("experiment", "sweep_id", "dataset", "constraint", "method", "phase", "epsilon", "gamma", "config_id", "seed", "steps", "epsilon_spent",
        "test_accuracy", "test_max_constraint", "val_accuracy", "val_max_constraint", "params")


def export_rows(uri: str, experiments: list[str]) -> pd.DataFrame:
    from raco_bench.report.export import export_part

    frames = []
    for name in experiments:
        part = export_part(uri, name)  # the sweep's rows, its spec params and its wall time, as a results page reads them
        seconds = part.wall_seconds if part.wall_seconds is not None else float("nan")
        frames.append(part.rows[list(KEEP)].assign(step_budget=part.params.get("sweep.step_budget", "noise"), seconds=seconds))
    return pd.concat(frames, ignore_index=True)


def compare(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, ε, γ, step budget): the phase-2 runs of the selected configuration, and the phase-1 medians."""
    out = []
    keys = ["dataset", "method", "epsilon", "gamma", "step_budget"]
    for key, group in rows.groupby(keys):
        p1, p2 = group[group["phase"] == 1], group[group["phase"] == 2]
        row = dict(zip(keys, key)) | {"phase1_configs": p1["config_id"].nunique(), "phase1_median_T": p1["steps"].median(),
                                      "phase1_median_eps_spent": p1["epsilon_spent"].median()}
        if len(p2):
            err = 1 - p2["test_accuracy"]
            row |= {"winner": int(p2["config_id"].iloc[0]), "runs": len(p2), "test_error": err.mean(), "test_error_sd": err.std(),
                    "test_constraint": p2["test_max_constraint"].mean(), "share_meeting_gamma": (p2["test_max_constraint"] <= key[3]).mean(),
                    "winner_T": p2["steps"].median(), "winner_eps_spent": p2["epsilon_spent"].median()}
        out.append(row)
    return pd.DataFrame(out)


def write_page(folder: Path) -> list[Path]:
    rows = pd.read_csv(folder / ROWS)
    c = compare(rows)
    c.to_csv(folder / "comparison.csv", index=False)
    wide = c.pivot_table(index=["dataset", "epsilon", "gamma"], columns="step_budget", values="test_error", aggfunc="first")
    wide["steps − noise"] = wide.get("steps") - wide.get("noise")
    times = rows.groupby(["dataset", "step_budget"])["seconds"].first().reset_index()
    lines = ["# Step-budget ablation: σ searched (T from the accountant) against T searched (σ calibrated)", "",
             "RaCO-DP, random search, the same configurations otherwise (docs/sweeps.md, \"Step budget\"). `noise`: σ uniform in [1, 10], "
             "T the largest that fits ε (capped at 5,000); `steps`: T log-uniform in [50, 5,000], σ the smallest that fits. Test error of the "
             "selected configuration, mean over its phase-2 seeds; a negative difference means T searched wins. Rebuild: "
             f"`python -m raco_bench.report.step_budget_ablation page {folder.as_posix()}`.", "",
             "## Test error of the selected configuration", "", wide.reset_index().round(4).to_markdown(index=False), "",
             "## Everything per parametrisation", "", c.round(4).to_markdown(index=False), "",
             "## Sweep wall time (2 cores, seconds)", "", times.to_markdown(index=False), ""]
    notes = folder / "NOTES.md"
    if notes.exists():
        lines.append(notes.read_text())
    (folder / "README.md").write_text("\n".join(lines))
    return [folder / "comparison.csv", folder / "README.md"]


def main(argv: list[str] | None = None) -> int:
    from raco_bench.report.table_page import main as table_main

    return table_main(__doc__, ROWS, export_rows, write_page, argv)


if __name__ == "__main__":
    raise SystemExit(main())
