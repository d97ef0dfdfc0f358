"""TPE against random search at equal numbers of configurations (docs/results.md, "Search comparison").

The first n configurations of a 200-configuration search are a search of n configurations: for random search because
its list is drawn once, for TPE whenever n is a multiple of its round size (docs/sweeps.md, "Search"). So one sweep
per search measures both at n = 25, 50, 100 and 200: for each n, the selection rule of the sweep
(:func:`raco_bench.sweeps.plan.select`: best mean validation accuracy among the configurations whose mean validation
constraint meets γ and none of whose seeds failed) picks a winner among configurations 0 … n − 1, and the page gives its
validation error and its test error and constraint value (means over its phase-1 seeds).

Two steps, so that the page is rebuilt from data alone: :func:`export_configurations` reads the sweeps' phase-1 rows
from MLflow into one table (a row per configuration), :func:`write_page` draws the page from that table.

    python -m raco_bench.report.search_comparison export --tracking-uri URI --experiment NAME [--experiment NAME ...] --out DIR
    python -m raco_bench.report.search_comparison page DIR
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

SIZES = (25, 50, 100, 200)
CONFIGS = "configurations.csv.gz"  # a row per phase-1 configuration of every compared sweep


def export_configurations(uri: str, experiments: list[str]) -> pd.DataFrame:
    """Every phase-1 configuration of each experiment's latest sweep: its search, sizes, the means over its seeds and
    whether a seed failed (against the best constant predictor at its γ, as the sweep's selection judges it)."""
    from raco_bench.constraints.families import Task
    from raco_bench.data import load_dataset
    from raco_bench.report.export import export_part
    from raco_bench.report.study import family_of
    from raco_bench.sweeps.plan import failed_seed, failure_baseline

    frames = []
    for name in experiments:
        part = export_part(uri, name)  # the sweep's rows and its spec params, as a results page reads them
        df = part.rows[part.rows["phase"] == 1]
        search, search_batch = part.params.get("sweep.search", "random"), int(float(part.params.get("sweep.search_batch", 25)))
        ds = load_dataset(str(df["dataset"].iloc[0]), preprocessing=str(df["preprocessing"].iloc[0]))
        baseline = failure_baseline(family_of(df), Task.of(ds), ds.val.y)  # the bar the sweep's selection used
        rows = []
        for (method, eps, gamma, cid), runs in df.groupby(["method", "epsilon", "gamma", "config_id"], dropna=False):
            bar = baseline(float(gamma)) if gamma == gamma else None
            seeds = runs.to_dict("records")
            rows.append({"experiment": name, "sweep_id": runs["sweep_id"].iloc[0], "search": search,
                         "search_batch": search_batch, "dataset": runs["dataset"].iloc[0],
                         "constraint": runs["constraint"].iloc[0], "method": method, "epsilon": eps, "gamma": gamma, "config_id": int(cid),
                         "seeds": len(seeds), "failed": any(failed_seed(r, bar) for r in seeds),
                         **{c: float(runs[c].mean()) for c in ("val_accuracy", "val_max_constraint", "test_accuracy", "test_max_constraint",
                                                               "steps", "epsilon_spent")},
                         "params": json.dumps(json.loads(runs["params"].iloc[0]), sort_keys=True)})
        frames.append(pd.DataFrame(rows))
    return pd.concat(frames, ignore_index=True)


def curve(configs: pd.DataFrame, sizes: tuple[int, ...] = SIZES) -> pd.DataFrame:
    """Per (dataset, method, ε, γ, search) and n: the winner among configurations 0 … n − 1 and its errors."""
    out = []
    keys = ["dataset", "constraint", "method", "epsilon", "gamma", "search"]
    for key, group in configs.groupby(keys, dropna=False):
        for n in sizes:
            if group["config_id"].max() < n - 1:
                continue  # the search did not get to n configurations (one the budget could not train is tried, not trained)
            seen = group[group["config_id"] < n]
            feasible = seen[~seen["failed"] & (seen["val_max_constraint"] <= key[4]) & seen["val_accuracy"].notna()]
            row = dict(zip(keys, key)) | {"n": n, "feasible": len(feasible)}
            if len(feasible):
                best = feasible.sort_values(["val_accuracy", "config_id"], ascending=[False, True]).iloc[0]
                row |= {"config_id": int(best["config_id"]), "val_error": 1 - best["val_accuracy"], "val_constraint": best["val_max_constraint"],
                        "test_error": 1 - best["test_accuracy"], "test_constraint": best["test_max_constraint"], "steps": best["steps"],
                        "epsilon_spent": best["epsilon_spent"]}
            out.append(row)
    return pd.DataFrame(out)


def _table(c: pd.DataFrame) -> str:
    wide = c.pivot_table(index=["dataset", "epsilon", "gamma", "n"], columns="search", values=["val_error", "test_error"], aggfunc="first")
    wide.columns = [f"{metric} ({search})" for metric, search in wide.columns]
    return wide.reset_index().round(4).to_markdown(index=False)


def write_page(folder: Path) -> list[Path]:
    """Draw the page from ``folder``/configurations.csv.gz: curve.csv, a figure of the selected model's errors against
    the number of configurations, and README.md with the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = pd.read_csv(folder / CONFIGS)
    c = curve(configs)
    c.to_csv(folder / "curve.csv", index=False)
    panels = list(c.groupby(["dataset", "method", "epsilon", "gamma"]).groups)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        sub = c[(c["dataset"] == panel[0]) & (c["method"] == panel[1]) & (c["epsilon"] == panel[2]) & (c["gamma"] == panel[3])]
        for search, style in (("tpe", "o-"), ("random", "s--")):
            s = sub[sub["search"] == search]
            ax.plot(s["n"], s["test_error"], style, label=f"{search}: test error")
            ax.plot(s["n"], s["val_error"], style, alpha=0.4, label=f"{search}: validation error")
        ax.set_xscale("log")
        ax.set_xticks(list(SIZES), [str(n) for n in SIZES])
        ax.set_title(f"{panel[0]}, {panel[1]}, ε = {panel[2]:g}, γ = {panel[3]:g}", fontsize=9)
        ax.set_xlabel("configurations tried")
        ax.set_ylabel("error of the selected configuration")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    written = []
    for ext in ("png", "pdf"):
        fig.savefig(folder / f"search.{ext}", dpi=130)
        written.append(folder / f"search.{ext}")
    plt.close(fig)
    sizes = configs.groupby(["experiment", "search", "dataset"]).size().reset_index(name="configurations trained")
    lines = ["# TPE against random search at equal numbers of configurations", "",
             "Each sweep ran one search over 200 configurations × 5 seeds (RaCO-DP, ε = 1, one γ per dataset); the winner among the",
             "first n configurations is what a search of n configurations selects (docs/sweeps.md, \"Search\"). Errors are the means",
             "over the winner's 5 phase-1 seeds (validation: what selected it; test: held out). Rebuild: "
             "`python -m raco_bench.report.search_comparison page results/tpe-vs-random`.", "",
             sizes.to_markdown(index=False), "", _table(c), "", "![search](search.png) ([PDF](search.pdf))", ""]
    extra = folder / "NOTES.md"
    if extra.exists():
        lines += [extra.read_text()]
    (folder / "README.md").write_text("\n".join(lines))
    return written + [folder / "curve.csv", folder / "README.md"]


def main(argv: list[str] | None = None) -> int:
    from raco_bench.report.table_page import main as table_main

    return table_main(__doc__, CONFIGS, export_configurations, write_page, argv)


if __name__ == "__main__":
    raise SystemExit(main())
