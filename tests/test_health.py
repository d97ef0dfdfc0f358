"""The health verdict of a result (raco_bench.training.health; docs/results.md, "Health of a result"): each rule flags
its planted degenerate result and passes a healthy one; a real degenerate run is flagged where it is shown (its result,
`raco-bench train`'s summary, a sweep's summary table, the report's satisfaction table and figures); `raco-bench train`
refuses, before training, a run its defaults would leave degenerate, naming the flag to change."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from raco_bench.training.health import Evidence, judge

ADULT_TEST = dict(constant_accuracy=0.7522, rows=11305)  # Adult's test split: the majority rate and its rows


def _healthy(**change) -> Evidence:
    base = dict(steps=175, passes=6.2, accuracy=0.81, top_class_share=0.8, epsilon=1.0, epsilon_spent=0.998, max_steps=5000, **ADULT_TEST)
    return Evidence(**{**base, **change})


@pytest.mark.parametrize("planted, flags", [
    (dict(), ()),
    (dict(steps=2, passes=0.55), ("few-steps",)),  # Parkinsons at B = 1,024 and ε = 1: T = 2
    (dict(accuracy=0.7523), ("constant",)),  # DP-FERMI's demo winner: the majority rate
    (dict(accuracy=0.60), ("constant",)),  # below the constant predictor
    (dict(accuracy=0.7523, top_class_share=0.999), ("constant", "one-class")),
    (dict(steps=600, max_steps=600, epsilon_spent=0.35), ("capped",)),  # RaCO-DP's demo winner: ε = 0.35 of 1 at the cap
    (dict(steps=600, max_steps=600, epsilon_spent=0.95), ()),  # at the cap, but the budget is spent
    (dict(epsilon=math.inf, epsilon_spent=math.inf, steps=5000), ()),  # non-private at the cap: nothing left unspent
])
def test_each_rule_flags_its_planted_degenerate_result(planted, flags):
    health = judge(_healthy(**planted))
    assert health.flags == flags and health.label == ("+".join(flags) or "ok")
    if flags:
        assert all(f.split("-")[0] in health.text for f in flags)  # each flag has its sentence with its numbers


def test_the_noise_margin_is_two_standard_errors_of_the_split():
    """Within 2 standard errors of the constant predictor's accuracy on the test rows: constant; just beyond: ok."""
    se = math.sqrt(0.7522 * 0.2478 / 11305)
    assert judge(_healthy(accuracy=0.7522 + 1.9 * se)).flags == ("constant",)
    assert judge(_healthy(accuracy=0.7522 + 2.1 * se)).ok


def test_a_rule_without_its_evidence_is_not_applied_and_says_so():
    health = judge(Evidence(accuracy=0.81, steps=100))  # a record from before the evidence was logged
    assert health.ok and set(health.unchecked) == {"few-steps", "constant", "one-class"} and "not checked" in health.text
    assert judge(Evidence.of({"test_accuracy": "0.75", "test_constant_accuracy": 0.75, "test_rows": 1000, "epsilon": None})).flags == ("constant",)


def test_a_real_degenerate_run_is_flagged_and_a_working_one_is_not(one_torch_thread):
    """ACS employment at ε = 1 with B = 1,024: T = 2 steps and every test prediction one class, at the majority rate."""
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import train

    bad = train(RunConfig(dataset="acs-employment", method="raco-dp", epsilon=1.0, seed=0, randomness="reproducible", params={"batch_size": 1024}))
    assert bad.steps == 2 and set(bad.health["flags"]) >= {"few-steps", "one-class"}, bad.health
    assert bad.reported["test"]["top_class_share"] == 1.0 and bad.dataset["constant_accuracy"]["test"] > 0.5
    good = train(RunConfig(dataset="synthetic", method="sgd", steps=300, seed=0, randomness="reproducible", params={"batch_size": 64}))
    assert good.health["flags"] == [], good.health


def _run(method, gamma, config, acc, share, val=0.8, seed=0, **extra) -> dict:
    return {"method": method, "epsilon": 1.0, "gamma": gamma, "config_id": config, "seed": seed, "test_accuracy": acc, "test_max_constraint": 0.01,
            "steps": 175.0, "passes": 6.0, "test_constant_accuracy": 0.7522, "test_rows": 11305.0, "test_top_class_share": share,
            "epsilon_spent": 0.99, "val_accuracy": val, **extra}


def test_the_sweep_summary_gives_each_selection_its_verdict_and_explains_a_looser_gamma():
    """Planted phase-2 runs: DP-FERMI's winner is the constant predictor (flagged in its column and in a line), RaCO-DP's
    winner at the looser γ is less accurate than at the tighter one (a line says why)."""
    from raco_bench.sweeps.plan import Selection
    from raco_bench.sweeps.runner import summarize
    from raco_bench.sweeps.spec import SweepSpec

    spec = SweepSpec(dataset="adult", methods=("raco-dp", "dp-fermi"), epsilons=(1.0,), gammas=(0.05, 0.1))
    selections = [Selection("raco-dp", 1.0, 0.05, 7, {}, 0.83, 0.04, 9, 12), Selection("raco-dp", 1.0, 0.1, 3, {}, 0.84, 0.08, 11, 12),
                  Selection("dp-fermi", 1.0, 0.05, 2, {}, 0.752, 0.0, 3, 12)]
    runs = ([_run("raco-dp", 0.05, 7, 0.822 + 0.001 * s, 0.8, seed=s) for s in range(3)]
            + [_run("raco-dp", 0.1, 3, 0.810 + 0.001 * s, 0.8, seed=s) for s in range(3)]
            + [_run("dp-fermi", None, 2, 0.7523, 1.0, seed=s) for s in range(3)])
    text, rows = summarize(spec, selections, runs)
    header = text.splitlines()[1]
    assert header.split()[-1] == "health"
    assert [r["health"] for r in rows] == ["ok", "ok", "constant+one-class"]
    assert "dp-fermi eps 1.0 gamma 0.05: constant: test accuracy 0.7523 is within noise of the constant predictor's 0.7522" in text
    assert "note: raco-dp eps 1.0: test accuracy at gamma 0.1 (0.8110) is below the tighter gamma 0.05's (0.8230)" in text
    assert "config 3: val 0.8400; config 7: val 0.8300" in text


def test_the_report_marks_a_flagged_selection_in_its_table_notes_and_figures(tmp_path):
    """The satisfaction table has the verdict of each selection's means, the notes name the flagged one, the Pareto
    figure draws a × over it (and says so in its key)."""
    import matplotlib.pyplot as plt

    from raco_bench.report.draw import health_notes
    from raco_bench.report.figures import FLAG_GID, tradeoff_figure
    from raco_bench.report.load import aggregate
    from raco_bench.report.satisfaction import satisfaction_rows

    rows = pd.DataFrame([{**_run("raco-dp", 0.05, 7, 0.82, 0.8, seed=s), "phase": 2, "test_error": 0.18, "max_steps": 5000, "sweep_id": "s"}
                         for s in range(3)]
                        + [{**_run("dp-fermi", None, 2, 0.7523, 1.0, seed=s), "phase": 2, "test_error": 0.2477, "max_steps": 5000, "sweep_id": "s"}
                           for s in range(3)])
    rows = rows.assign(test_max_constraint=[0.01, 0.012, 0.011, 0.0, 0.0, 0.0], privacy_notion="record-level add/remove DP", delta=1e-5,
                       checkpoint="last", outside_budget="none", test_fnr=math.nan, test_worst_group_loss=math.nan, style=None)
    selections = [{"method": "raco-dp", "epsilon": 1.0, "gamma": 0.05, "config_id": 7, "sweep_id": "s"},
                  {"method": "dp-fermi", "epsilon": 1.0, "gamma": 0.05, "config_id": 2, "sweep_id": "s"}]
    sat = satisfaction_rows(rows, selections)
    assert list(sat["health"]) == ["constant+one-class", "ok"]  # sorted by method
    (note,) = health_notes(sat)
    assert note.startswith("dp-fermi at ε = 1, γ = 0.05 is flagged **constant+one-class**")
    captured = {}
    original = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)
    try:
        tradeoff_figure(aggregate(rows), rows, tmp_path, "pareto", "test_max_constraint", "test_error", "x", "y", "t", selections=selections,
                        gamma_lines=True)
    finally:
        plt.close = original
    fig = captured["fig"]
    (crosses,) = [c for c in fig.axes[0].collections if c.get_gid() == FLAG_GID]
    assert len(crosses.get_offsets()) == 1 and any("×: flagged by the health rules" in t.get_text().replace("\n", " ") for t in fig.texts)
    assert any(t.get_text() == "γ = 0.05" for t in fig.axes[0].texts)  # the γ line, labelled
    plt.close(fig)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([sys.executable, "-m", "raco_bench.cli", "train", "--no-mlflow", "--quiet", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_train_refuses_what_its_settings_would_leave_degenerate_and_names_the_flag():
    """ACS income's test split has groups of 2 rows: γ = 0.05 is below its noise floor; Parkinsons at B = 1,024 and ε = 1
    gets T = 2 steps. Each is refused before training, with the flag to change."""
    floor = _train("--dataset", "acs-income")
    assert floor.returncode == 2 and "gamma=0.05 is below the noise floor of acs-income's test split" in floor.stderr, floor.stderr[-2000:]
    assert "pass --gamma" in floor.stderr and "--allow-unhealthy" in floor.stderr and "training" not in floor.stderr
    short = _train("--dataset", "parkinsons", "--set", "batch_size=1024")
    assert short.returncode == 2 and "allows T = 2 steps, 0.55 expected passes over the 3,745 training rows" in short.stderr, short.stderr[-2000:]
    assert "lower --set batch_size" in short.stderr


@pytest.mark.slow
def test_train_defaults_give_parkinsons_a_working_model():
    """Without --set batch_size, train's expected batch size follows the data (q ≈ 1/32): Parkinsons trains a few
    hundred steps at ε = 1 and its summary says the model is healthy."""
    proc = _train("--dataset", "parkinsons", "--randomness", "reproducible")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "batch_size 128 (the default for 3,745 training rows" in proc.stderr and "health: ok" in proc.stdout, proc.stdout
