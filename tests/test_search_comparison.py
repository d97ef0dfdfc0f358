"""The TPE-against-random page: the winner among the first n configurations, by the sweep's own selection rule."""

from __future__ import annotations

import pandas as pd

from raco_bench.report.search_comparison import CONFIGS, curve, write_page


def _configs(search: str, accuracies: list[float], constraints: list[float], failed: set[int] = frozenset()) -> pd.DataFrame:
    n = len(accuracies)
    return pd.DataFrame({"experiment": f"x-{search}", "search": search, "dataset": "adult", "constraint": "demographic-parity", "method": "raco-dp",
                         "epsilon": 1.0, "gamma": 0.05, "config_id": range(n), "failed": [i in failed for i in range(n)],
                         "val_accuracy": accuracies, "val_max_constraint": constraints, "test_accuracy": [a - 0.01 for a in accuracies],
                         "test_max_constraint": constraints, "steps": 100, "epsilon_spent": 1.0})


def test_the_winner_among_the_first_n_meets_gamma_and_has_no_failed_seed(tmp_path):
    acc = [0.80] * 200
    con = [0.01] * 200
    acc[10], con[10] = 0.90, 0.06  # best, but infeasible
    acc[20] = 0.85  # the winner among 25 and 50
    acc[60] = 0.88  # among 100, but a seed failed
    acc[150] = 0.87  # the winner among 200
    c = curve(_configs("tpe", acc, con, failed={60}))
    assert list(c["n"]) == [25, 50, 100, 200]
    assert list(c["config_id"]) == [20, 20, 20, 150]
    assert c["val_error"].round(4).tolist() == [0.15, 0.15, 0.15, 0.13] and c["test_error"].round(4).tolist() == [0.16, 0.16, 0.16, 0.14]
    assert c["feasible"].tolist() == [24, 49, 98, 198]
    short = curve(_configs("random", acc[:60], con[:60]))
    assert list(short["n"]) == [25, 50]  # a search that did not get to n configurations has no row at n
    gaps = _configs("random", acc, con).drop(index=[3, 199 - 1])  # two configurations the budget could not train
    assert list(curve(gaps)["n"]) == [25, 50, 100, 200]
    pd.concat([_configs("tpe", acc, con), _configs("random", acc, con)]).to_csv(tmp_path / CONFIGS, index=False)
    written = write_page(tmp_path)
    assert (tmp_path / "search.png").exists() and "test_error (tpe)" in (tmp_path / "README.md").read_text() and len(written) == 4
