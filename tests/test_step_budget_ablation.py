"""The step-budget ablation page: per parametrisation, the selected configuration's phase-2 errors and the T it spent."""

from __future__ import annotations

import pandas as pd

from raco_bench.report.step_budget_ablation import ROWS, compare, write_page


def _rows(budget: str, phase2_acc: list[float], steps: int) -> pd.DataFrame:
    p1 = [{"phase": 1, "config_id": c, "seed": s, "steps": 100 * (c + 1), "epsilon_spent": 0.5 + 0.1 * c, "test_accuracy": 0.7,
           "test_max_constraint": 0.01} for c in range(3) for s in range(2)]
    p2 = [{"phase": 2, "config_id": 2, "seed": 1000 + i, "steps": steps, "epsilon_spent": 1.0, "test_accuracy": a,
           "test_max_constraint": 0.04 + 0.02 * i} for i, a in enumerate(phase2_acc)]
    return pd.DataFrame(p1 + p2).assign(experiment=f"x-{budget}", sweep_id=budget, dataset="parkinsons", constraint="demographic-parity",
                                        method="raco-dp", epsilon=1.0, gamma=0.05, val_accuracy=0.7, val_max_constraint=0.01, params="{}",
                                        step_budget=budget, seconds=60.0)


def test_each_parametrisation_reports_its_winner_and_medians(tmp_path):
    rows = pd.concat([_rows("noise", [0.8, 0.9], 48), _rows("steps", [0.9, 0.9], 4800)], ignore_index=True)
    c = compare(rows).set_index("step_budget")
    assert round(c.loc["noise", "test_error"], 9) == 0.15 and round(c.loc["steps", "test_error"], 9) == 0.1
    assert c.loc["noise", "winner_T"] == 48 and c.loc["steps", "winner_T"] == 4800
    assert c.loc["noise", "share_meeting_gamma"] == 0.5 and c.loc["noise", "phase1_median_T"] == 200 and c.loc["noise", "phase1_configs"] == 3
    rows.to_csv(tmp_path / ROWS, index=False)
    write_page(tmp_path)
    text = (tmp_path / "README.md").read_text()
    assert "steps − noise" in text and "-0.05" in text
