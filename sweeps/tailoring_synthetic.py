"""Alabi & Wiggins' synthetic experiment (their Table 1): budget tailoring (DPSE) vs the equal split (DPNoSE)
vs parallel composition, MSPE per group of a private linear regression on a mixture of linear models.

    python sweeps/tailoring_synthetic.py [--trials 100] [--rhos 0.0208 0.1735 2 4.5 8] [--penalties 0 1] [--out DIR]

Writes ``tailoring_synthetic.csv`` and ``tailoring_synthetic.md`` (the table, the smallest groups' MSPE of
each allocation relative to the equal split, and the paper's Table 1 beside it) to ``--out``, and logs
them to MLflow (experiment ``tailoring-synthetic``; SQLite ``./mlflow.db`` by default). What the numbers
mean: docs/methods/budget-tailoring.md, "Synthetic experiment".
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import pandas as pd

from baselines.budget_tailoring.plugin import epsilon_for
from baselines.budget_tailoring.synthetic import SIZES, SyntheticSetting, run_experiment
from raco_bench import preflight, tracking
from raco_bench.report.tables import markdown_table

EXPERIMENT = "tailoring-synthetic"
# the paper's Table 1 (K = 5, 20x): MSPE of groups 2-5 (mean), DPNoSE vs DPSE, at rho = 2, 4.5, 8
PAPER_MINORITY_MSPE = {2.0: (19.82, 16.67), 4.5: (19.80, 16.67), 8.0: (19.75, 16.65)}
PAPER_GROUP1_MSPE = {2.0: (1.02, 1.27), 4.5: (1.01, 1.26), 8.0: (1.01, 1.25)}


def summarise(df: pd.DataFrame, K: int) -> pd.DataFrame:
    """Per (G, ρ, allocation): group 1's MSPE, the mean MSPE of the small groups and its ratio to the equal split."""
    out = df.copy()
    small = [f"mspe_{k}" for k in range(2, K + 1)]
    out["mspe_small_groups"] = out[small].mean(1)
    equal = out[out["allocation"] == "equal"].set_index(["penalty", "rho"])["mspe_small_groups"]
    out["vs_equal"] = [r.mspe_small_groups / equal[(r.penalty, r.rho)] for r in out.itertuples()]
    out["epsilon_at_1e-5"] = [epsilon_for(r, 1e-5) for r in out["rho"]]
    return out[["penalty", "rho", "epsilon_at_1e-5", "allocation", "mspe_1", "mspe_small_groups", "vs_equal"]
               + [f"weight_{k}" for k in range(1, K + 1)] + ["trials"]]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=100, help="data sets and noise draws per cell (the paper used 1,000)")
    p.add_argument("--rhos", type=float, nargs="+", default=[0.0208, 0.1735, 2.0, 4.5, 8.0],
                   help="total zCDP budgets (0.0208 and 0.1735 are epsilon = 1 and 3 at delta = 1e-5; 2, 4.5, 8 are the paper's)")
    p.add_argument("--penalties", type=float, nargs="+", default=[0.0, 1.0], help="G, the worst-group penalty (0: no BGL term)")
    p.add_argument("--out", default=None, help="output folder (default: ./tailoring_synthetic)")
    p.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.trials < 2:
        p.error("--trials must be >= 2 (the table reports standard errors)")
    if any(r <= 0 for r in args.rhos):
        p.error("every --rhos value must be > 0")
    uri = tracking.resolve_tracking_uri(args.tracking_uri)
    try:  # before the experiment runs: its store and output folder answer and can be written (raco_bench/preflight.py)
        preflight.check_store(uri, tracking.tracking_uri_source(args.tracking_uri)[1], EXPERIMENT)
        out = preflight.setting(args.out, "--out", "tailoring_synthetic", default_note="./tailoring_synthetic")
        preflight.check_folder(out, "the output folder", "pass --out a writable folder")
    except ValueError as exc:
        p.error(str(exc))
    args.out = Path(out.value)
    start = time.perf_counter()
    rows = []
    for G in args.penalties:
        setting = dataclasses.replace(SyntheticSetting(), penalty=G)
        for row in run_experiment(setting, args.rhos, ["tailored", "equal", "parallel"], args.trials, args.seed):
            rows.append({"penalty": G, **row})
            print(f"G = {G:g}, rho = {row['rho']:g}, {row['allocation']:>8}: MSPE " + ", ".join(f"{row[f'mspe_{k}']:.3f}"
                  for k in range(1, len(SIZES) + 1)), flush=True)
    seconds = time.perf_counter() - start
    df = pd.DataFrame(rows)
    table = summarise(df, len(SIZES))
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "tailoring_synthetic.csv", index=False)
    paper = pd.DataFrame([{"rho": r, "DPNoSE group 1": PAPER_GROUP1_MSPE[r][0], "DPSE group 1": PAPER_GROUP1_MSPE[r][1],
                           "DPNoSE groups 2-5": v[0], "DPSE groups 2-5": v[1], "DPSE / DPNoSE (groups 2-5)": round(v[1] / v[0], 3)}
                          for r, v in PAPER_MINORITY_MSPE.items()])
    command = "python sweeps/tailoring_synthetic.py " + " ".join(argv)
    md = ["# Budget tailoring, synthetic mixtures (Alabi & Wiggins, Table 1 setting)", "",
          f"Command: `{command.strip()}`; {args.trials} trials per cell; {seconds:.0f} s. Group sizes {SIZES}; slopes "
          f"{SyntheticSetting().slopes}; x ~ N(0, {SyntheticSetting().feature_scale}² I); group sizes public (the paper's assumption).",
          "", "## Measured", "", markdown_table(table.round(4)), "", "## The paper's Table 1 (DPSE vs DPNoSE, K = 5, 20x)", "",
          markdown_table(paper), ""]
    (args.out / "tailoring_synthetic.md").write_text("\n".join(md))
    print("\n".join(md))
    exp = tracking.get_or_create_experiment(uri, EXPERIMENT)
    run_id = tracking.create_run(uri, exp, f"synthetic-{args.trials}-trials")
    for path in ("tailoring_synthetic.csv", "tailoring_synthetic.md"):
        tracking.log_artifacts(uri, run_id, args.out / path)
    metrics = {f"vs_equal_G{r.penalty:g}_rho{r.rho:g}_{r.allocation}": r.vs_equal for r in table.itertuples()}
    tracking.finish_run(uri, run_id, metrics, {"trials": args.trials, "rhos": args.rhos, "penalties": args.penalties,
                                                         "seconds": round(seconds, 1), "command": command})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
