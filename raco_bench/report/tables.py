"""Wall-time tables (paper Table 2) from the benchmark's MLflow experiment, as Markdown, LaTeX and CSV."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from raco_bench import tracking

WALLTIME_EXPERIMENT = "raco-bench-walltime"


def log_walltime(uri: str, timings, hardware: str, experiment: str, reference: str) -> str:
    """One parent run per benchmark invocation, one child run per (dataset, method)."""
    ref = {t.dataset: t.ms_mean for t in timings if t.method == reference}
    rows = []
    for t in timings:
        metrics = {"ms_mean": t.ms_mean, "ms_sd": t.ms_sd}
        if t.dataset in ref:
            metrics[f"ratio_to_{reference.replace('-', '_')}"] = t.ms_mean / ref[t.dataset]
        params = {"dataset": t.dataset, "method": t.method, "batch_size": t.batch_size, "hardware": hardware, "rounds": t.rounds,
                  "steps_per_round": t.steps_per_round}
        rows.append(tracking.RunRecord(f"{t.dataset} {t.method}", {tracking.KIND: "walltime-row"}, params, metrics))
    parent = tracking.RunRecord(f"walltime {hardware}", {tracking.KIND: "walltime", "hardware": hardware}, {}, {})
    return tracking.log_records(uri, experiment, parent, rows)


def load_walltime(uri: str, experiment: str = WALLTIME_EXPERIMENT) -> pd.DataFrame | None:
    """The latest benchmark invocation's rows, or None when the benchmark was never logged."""
    rows = tracking.latest_rows(uri, experiment, "walltime")
    if not rows:
        return None
    df = pd.DataFrame(rows)
    df["batch_size"] = df["batch_size"].astype(int)
    return df.sort_values(["dataset", "ms_mean"]).reset_index(drop=True)


def markdown_table(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False)


def latex_table(df: pd.DataFrame, caption: str, label: str, float_format: str | None = None) -> str:
    """A booktabs table (pandas escapes the cells; the caption is escaped here, and ± becomes $\\pm$)."""
    caption = re.sub(r"([&%_#$])", r"\\\1", caption)
    return df.to_latex(index=False, escape=True, caption=caption, label=label, position="t",
                       float_format=(lambda v: float_format % v) if float_format else None).replace("±", r"$\pm$")


def write_walltime_tables(df: pd.DataFrame, out: Path, stem: str = "walltime") -> list[Path]:
    hardware = "; ".join(sorted(df["hardware"].unique()))
    ratio_col = next((c for c in df.columns if c.startswith("ratio_to_")), None)
    table = pd.DataFrame({
        "dataset": df["dataset"], "method": df["method"], "batch size": df["batch_size"],
        "ms/step (mean ± sd)": [f"{m:.3f} ± {s:.3f}" for m, s in zip(df["ms_mean"], df["ms_sd"])],
    })
    if ratio_col:
        table[ratio_col.replace("ratio_to_", "ratio to ").replace("_", "-")] = [f"{v:.2f}" for v in df[ratio_col]]
    csv, md, tex = out / f"{stem}.csv", out / f"{stem}.md", out / f"{stem}.tex"
    df.to_csv(csv, index=False)
    md.write_text(f"Mean wall time per step (hardware: {hardware}).\n\n" + markdown_table(table) + "\n")
    tex.write_text(latex_table(table, f"Mean wall time per training step ({hardware}).", "tab:walltime"))
    return [csv, md, tex]


def satisfaction_latex(sat: pd.DataFrame, title: str) -> str:
    """The satisfaction table (paper Fig. 3's numbers) as booktabs LaTeX: per method, ε and γ, the selected
    configuration's test constraint value and error (mean ± sd over its phase-2 runs) and the share meeting γ."""
    table = pd.DataFrame({
        "method": sat["method"], "ε": ["∞" if e == float("inf") else f"{e:g}" for e in sat["epsilon"]], "γ": [f"{g:g}" for g in sat["gamma"]],
        "runs": sat["n_runs"].astype(int),
        "constraint value": [f"{m:.4f} ± {s:.4f}" for m, s in zip(sat["test_max_constraint"], sat["test_max_constraint_sd"].fillna(0.0))],
        "error": [f"{m:.4f} ± {s:.4f}" for m, s in zip(sat["test_error"], sat["test_error_sd"].fillna(0.0))],
        "meets γ": [f"{100 * v:.0f}\\%" for v in sat["share_meeting"]],
    })
    tex = latex_table(table, f"{title}: the selected configuration per method, epsilon and gamma on test "
                             "(mean ± sd over phase-2 runs; meets gamma: share of those runs whose constraint value is at most gamma).",
                      "tab:satisfaction")
    return tex.replace("ε", r"$\varepsilon$").replace("γ", r"$\gamma$").replace("∞", r"$\infty$").replace(r"\textbackslash \%", r"\%")
