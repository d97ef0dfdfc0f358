"""Every registered method, through every generic path, on the generated ``synthetic`` dataset.

A new method registered in raco_bench/methods/__init__.py is picked up here with no change: it must
validate bad settings with a clear error, declare a search space whose samples validate, plan its
privacy (a private plan within budget, a non-private one without privacy parameters), train, and
appear, labelled, in a smoke sweep's MLflow store and in its report.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import stores

from raco_bench.constraints.families import FAMILIES, custom_family
from raco_bench.data import load_dataset
from raco_bench.methods import METHOD_NAMES, get_method
from raco_bench.methods.space import sample_configs
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import execute, prepare_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def synthetic():
    return load_dataset("synthetic")


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_bad_settings_get_a_clear_error(name):
    method = get_method(name)
    with pytest.raises(ValueError, match="unknown setting.*known settings"):
        method.hyperparameters({"no_such_setting": "1"})
    with pytest.raises(ValueError, match="batch_size"):
        method.hyperparameters({"batch_size": "0"})
    with pytest.raises(ValueError, match="lr"):
        method.hyperparameters({"lr": "-1"})


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_search_space_samples_validate_and_are_deterministic(name):
    method = get_method(name)
    configs = sample_configs(method, 6, 5000, seed=3)
    assert configs == sample_configs(method, 6, 5000, seed=3)
    batch = getattr(method.Hyper(), "batch_size", None)  # None: a full-batch method
    assert configs[0] == ({"batch_size": min(batch, 5000 // 4)} if batch is not None else {})
    fields = {f.name for f in dataclasses.fields(method.Hyper)}
    for config in configs:
        assert set(config) <= fields
        method.hyperparameters(config)  # validates
        assert config.get("batch_size", 0) <= 2500


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_supports_answers_for_every_constraint(name):
    method = get_method(name)
    for fam in [*FAMILIES.values(), custom_family("fnr-gap", "FNR(group=0) - FNR(group=1)")]:
        answer = method.supports(fam)
        assert answer is None or (isinstance(answer, str) and answer)
    assert method.supports(FAMILIES["demographic-parity"]) is None


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_plans_privacy_and_trains(name, synthetic):
    method = get_method(name)
    params = {"batch_size": 128} if hasattr(method.Hyper(), "batch_size") else {}  # full-batch methods have none
    cfg = RunConfig(dataset="synthetic", method=name, epsilon=2.0, max_steps=300, eval_every=100, params=params)
    run = prepare_run(cfg, synthetic)
    p = run.ctx.privacy
    assert run.ctx.plan is not None and run.ctx.steps >= 1
    if method.private:
        assert p["private"] and 0 < p["epsilon_spent"] <= 2.0 and p["delta"] == cfg.delta and p["notion"] != "none"
        assert p["end_to_end"] and p["outside_budget"] == []
        # the calibration the sweep would solve is the one the trainer used
        problem = method.calibration(run.ctx.hyper, len(synthetic.train), run.ctx.budget)
        assert problem is None or problem.within_budget(problem.solve())  # None: closed-form (budget-tailoring's zCDP split)
    else:
        assert not p["private"] and math.isinf(p["epsilon_spent"])
        assert not {"delta", "target_epsilon", "noise_multiplier", "sampling_rate"} & set(p)
        assert not {"noise_multiplier", "laplace_scale", "clip_norm", "count_noise"} & set(method.applicable(run.ctx.hyper))
    result = execute(run)
    assert result.steps == run.ctx.steps and len(result.history) >= 2
    assert 0.5 <= result.reported["test"]["accuracy"] <= 1.0
    assert all(np.all(np.isfinite(v)) for v in result.final_params.values())


SWEEP_SCRIPT = (
    "import sys\nfrom raco_bench.sweeps.runner import main\nfrom raco_bench.sweeps.spec import SweepSpec\n"
    f"sys.exit(main(SweepSpec(dataset='synthetic', methods={METHOD_NAMES!r}, epsilons=(3.0,), gammas=(0.1,)), sys.argv[1:]))\n"
)
# the smoke sweep over every registered method, with a calibration cache of its own; made in the background from the
# start of the session (tests/stores.py)
SWEEP = stores.background("every_method_store", [sys.executable, "-c", SWEEP_SCRIPT, "--smoke", "--max-steps", "60"],
                          env={"RACO_BENCH_CACHE": "{cwd}/cache"})


@pytest.fixture
def every_method_store() -> Path:
    return SWEEP.folder()


@pytest.mark.slow
def test_every_method_appears_in_a_smoke_sweep_and_its_report(every_method_store, tmp_path):
    """A smoke sweep over every registered method on the synthetic dataset: each is in the MLflow store,
    labelled and logged as its plugin says, parents end FINISHED, and each is in the report."""
    from raco_bench import tracking
    from raco_bench.report.build import build_report

    uri = f"sqlite:///{every_method_store / 'mlflow.db'}"
    exp = tracking.client(uri).get_experiment_by_name("synthetic-demographic-parity-smoke").experiment_id
    table = tracking.pack_tables(uri, tracking.completed_packs(uri, exp))
    assert set(table["method"]) == set(METHOD_NAMES) and table["trial_key"].is_unique
    for row in table.to_dict("records"):  # every configuration's row, labelled as its plugin says
        assert row["method_style"] == ",".join(get_method(row["method"]).style) and row["outside_budget"] == "none"
    trials = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")  # phase-2 configurations' own runs
    assert trials and {r.data.tags[tracking.TRIAL_KEY] for r in trials} == set(table.loc[table["phase"] == 2, "trial_key"])
    for r in trials:
        method = get_method(r.data.tags["method"])
        assert r.data.tags["method_style"] == ",".join(method.style) and r.data.tags["outside_budget"] == "none"
        if not method.private:
            assert not any(k.startswith(("run.epsilon", "run.delta", "privacy.delta")) for k in r.data.params)
            assert "noise_multiplier" not in r.data.params
    parents = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'phase'")
    assert len(parents) == 2 and all(p.info.status == "FINISHED" and "sweep.dataset" in p.data.params for p in parents)
    report = build_report("synthetic-demographic-parity-smoke", uri, tmp_path / "report", log_to_mlflow=False)
    import pandas as pd

    runs = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert set(runs["method"]) == set(METHOD_NAMES) and any(p.name == "pareto.png" for p in report.files)
