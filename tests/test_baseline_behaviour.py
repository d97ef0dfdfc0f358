"""The seed papers' other methods as they behave (their privacy mechanisms are in tests/test_baseline_privacy.py):
the post-processing LP, the randomised predictor, PF-LD's reductions, budget tailoring's allocation, the
synthetic experiment's script, and the legends that name each privacy notion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from baselines.budget_tailoring.plugin import tailored_weights
from baselines.dp_postprocess.plugin import derived_histograms, solve_derived_predictor
from raco_bench.constraints import build_constraint
from raco_bench.data import load_dataset
from raco_bench.report.figures import method_labels
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import execute, prepare_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def synthetic():
    return load_dataset("synthetic")


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds", "false-negative-rate"])
def test_postprocessing_lp_meets_the_constraints_on_its_counts(constraint):
    """With exact counts the LP's predictor meets every constraint (no slack) and does better than a constant one."""
    G = 2
    problem = build_constraint(constraint, G, 2, 0.02)
    rates = problem.compile("cpu", torch.float64)
    parts = problem.partition.assign(np.repeat(np.arange(2), G), np.tile(np.arange(G), 2)).reshape(2, G)
    counts = torch.tensor([[[700.0, 60.0], [300.0, 10.0]], [[90.0, 150.0], [40.0, 60.0]]], dtype=torch.float64)  # n[y, a, ŷ]
    table, slack = solve_derived_predictor(counts, rates, problem.gamma, parts)
    assert slack == pytest.approx(0.0, abs=1e-9)
    values = rates.values(derived_histograms(counts, table[None], parts, rates.n_parts))[0].numpy()
    assert (values <= problem.gamma + 1e-9).all()
    error = float(((counts[0] * table).sum() + (counts[1] * (1 - table)).sum()) / counts.sum())
    constants = torch.stack([torch.zeros(G, 2, dtype=torch.float64), torch.ones(G, 2, dtype=torch.float64)])  # Ỹ = 0, Ỹ = 1
    feasible = (rates.values(derived_histograms(counts, constants, parts, rates.n_parts)) <= torch.as_tensor(problem.gamma) + 1e-9).all(1)
    constant_errors = torch.stack([counts[1].sum(), counts[0].sum()]) / counts.sum()
    assert error <= float(constant_errors[feasible].min()) + 1e-9  # no worse than the best feasible constant predictor
    loose, _ = solve_derived_predictor(counts, rates, np.full(problem.n_constraints, 10.0), parts)
    assert torch.allclose(loose, torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float64))  # no constraint: follow Ŷ


def test_postprocessed_predictor_is_randomised_with_its_table(synthetic):
    """The evaluation's draw of Ỹ is 1 at the rate p[a, ŷ], per group."""
    cfg = RunConfig(dataset="synthetic", method="dp-postprocess", epsilon=4.0, steps=5, params={"batch_size": 128})
    run = prepare_run(cfg, synthetic)
    split = run.evals["test"]
    params = dict(run.method.init_state(run.ctx, __import__("raco_bench.privacy.counter_rng", fromlist=["Stream"]).Stream(0)).base.params)
    params["postprocess"] = torch.tensor([[0.3, 0.3], [0.8, 0.8]], dtype=torch.float64)
    log_probs, pred = run.method.eval_outputs(run.ctx, params, split)
    for g, rate in ((0, 0.3), (1, 0.8)):
        rows = split.group == g
        assert float(pred[rows].double().mean()) == pytest.approx(rate, abs=4 / float(rows.sum()) ** 0.5)
        assert torch.allclose(log_probs[rows, 1].exp(), torch.tensor(rate, dtype=log_probs.dtype))


def test_postprocess_run_meets_gamma_on_train_at_a_large_budget(synthetic):
    cfg = RunConfig(dataset="synthetic", method="dp-postprocess", epsilon=20.0, gamma=0.05, params={"batch_size": 128}, train_metrics=True)
    result = execute(prepare_run(cfg, synthetic))
    assert result.reported["train"]["max_violation"] <= 0.03  # one draw of Ỹ, noisy counts: a small margin
    assert result.history[-1]["lp_slack"] == pytest.approx(0.0, abs=1e-6)
    assert "GROUP AT PREDICTION" in result.privacy["notion"]


def test_pfld_without_multipliers_is_plain_sgd(synthetic):
    """λ_max = 0: PF-LD's step is the suite's SGD step (same batches, same loss, same normalisation)."""
    common = {"dataset": "synthetic", "steps": 30, "eval_every": 30}
    pf = prepare_run(RunConfig(method="pf-ld", params={"lambda_max": 0.0, "privacy": "none", "batch_size": 128, "lr": 0.3}, **common), synthetic)
    sgd = prepare_run(RunConfig(method="sgd", params={"batch_size": 128, "lr": 0.3}, **common), synthetic, source=pf.ctx.source)
    sgd.ctx.stream_id = pf.ctx.stream_id  # two configurations draw distinct streams; here they must draw the same
    pf, sgd = execute(pf), execute(sgd)
    for k in pf.final_params:
        np.testing.assert_allclose(pf.final_params[k], sgd.final_params[k], rtol=1e-4, atol=1e-6)


def test_non_private_fld_reduces_the_parity_gap(adult):
    def gap(lambda_max: float) -> tuple[float, float]:
        cfg = RunConfig(dataset="adult", method="pf-ld", steps=300, eval_every=100, train_metrics=True,
                        params={"lambda_max": lambda_max, "dual_lr": 1.0, "privacy": "none", "batch_size": 1024})
        result = execute(prepare_run(cfg, adult))
        return result.last["train"]["dp_gap"], max(e.get("lambda_max", 0.0) for e in result.history)

    free, _ = gap(0.0)
    constrained, lam = gap(20.0)
    assert constrained < 0.25 * free and 0 < lam <= 20.0


def test_tailoring_gives_the_noisier_group_more_budget():
    gen = torch.Generator().manual_seed(0)
    n = 20_000
    X = torch.randn(n, 2, generator=gen, dtype=torch.float64) * 0.3
    group = (torch.rand(n, generator=gen) < 0.1).long()
    y = X @ torch.tensor([1.0, -1.0], dtype=torch.float64) + torch.randn(n, generator=gen, dtype=torch.float64) * (0.2 + 1.0 * group)
    weights, se, fallback = tailored_weights(X, y, group, 2, torch.bincount(group).double(), 50.0, 5.0, 5.0,
                                             lambda k: torch.randn(k, generator=gen, dtype=torch.float64))
    assert not fallback and float(weights.sum()) == pytest.approx(1.0)
    assert weights[1] > 0.8 and se[1] > 3 * se[0]


@pytest.mark.slow
def test_synthetic_experiment_script_writes_its_table_and_logs_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "sweeps" / "tailoring_synthetic.py"), "--trials", "2", "--rhos", "2", "--penalties", "0",
                           "--out", str(tmp_path / "out"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_csv(tmp_path / "out" / "tailoring_synthetic.csv")
    assert set(table["allocation"]) == {"tailored", "equal", "parallel"} and (table["mspe_1"] > 0).all()
    assert "paper's Table 1" in (tmp_path / "out" / "tailoring_synthetic.md").read_text()
    from raco_bench import tracking

    exp = tracking.client(f"sqlite:///{tmp_path / 'mlflow.db'}").get_experiment_by_name("tailoring-synthetic")
    runs = tracking.search_all(f"sqlite:///{tmp_path / 'mlflow.db'}", [exp.experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"


def test_legends_name_each_privacy_notion():
    df = pd.DataFrame({"method": ["raco-dp", "pf-ld", "dp-postprocess", "budget-tailoring", "sgda"],
                       "privacy_notion": ["record-level add/remove DP", "sensitive-attribute DP only (x and y public)",
                                          "record-level add/remove DP (full); the derived predictor USES THE GROUP AT PREDICTION",
                                          "record-level add/remove DP (rho-zCDP, converted)", "none"]})
    labels = method_labels(df)
    assert labels == {"raco-dp": "raco-dp [record DP]", "pf-ld": "pf-ld [A-only DP]",
                      "dp-postprocess": "dp-postprocess [record DP, uses A at prediction]",
                      "budget-tailoring": "budget-tailoring [record DP via zCDP]", "sgda": "sgda [non-private]"}


def test_pfld_score_gradients_closed_form_equals_autodiff():
    """PF-LD's clipped Σ_j w_j clip(∇h(x_j), C): logistic regression's closed form against per-sample autodiff
    (the path every other model, the MLP included, takes)."""
    from baselines.pf_ld.plugin import clipped_score_sum, score_grads
    from raco_bench.models import MLP, LogisticRegression
    from raco_bench.privacy.counter_rng import Stream

    gen = torch.Generator().manual_seed(0)
    X, w = torch.randn(64, 6, generator=gen), torch.randn(64, generator=gen)
    model = LogisticRegression(6, 2)
    params = {k: v * 5 for k, v in model.init(Stream(1)).items()}
    for clip in (None, 0.05):
        fast = clipped_score_sum(model, params, X, w, clip)
        grads = score_grads(model, params, X)
        norms = torch.sqrt(sum(g.flatten(1).square().sum(1) for g in grads.values()))
        factor = torch.ones_like(norms) if clip is None else (clip / norms).clamp(max=1.0)
        for k, g in grads.items():
            torch.testing.assert_close(fast[k], torch.tensordot(w * factor, g, dims=1), rtol=1e-4, atol=1e-6)
    mlp = MLP(6, 2, 8)
    out = clipped_score_sum(mlp, mlp.init(Stream(2)), X, torch.ones(64), 0.01)
    assert torch.sqrt(sum(v.square().sum() for v in out.values())) <= 64 * 0.01 * (1 + 1e-5)  # each clipped to C


def test_postprocess_private_selection_charges_the_one_release_it_makes(synthetic):
    """dp-postprocess's model exists only at its last step: checkpoint=private makes one noisy validation release,
    and the printed ε composes exactly one (dp-accounting: base steps, histogram, one selection release)."""
    import dp_accounting

    cfg = RunConfig(dataset="synthetic", method="dp-postprocess", epsilon=3.0, checkpoint="private", selection_noise=20.0,
                    selection_checkpoints=5, params={"batch_size": 128})
    run = prepare_run(cfg, synthetic)
    h, T = run.ctx.hyper, run.ctx.steps
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.PoissonSampledDpEvent(128 / len(synthetic.train), dp_accounting.GaussianDpEvent(h.noise_multiplier)), T)
    acc.compose(dp_accounting.LaplaceDpEvent(1 / (h.histogram_share * 3.0)))
    acc.compose(dp_accounting.LaplaceDpEvent(20.0))
    assert run.ctx.privacy["epsilon_spent"] == pytest.approx(acc.get_epsilon(cfg.delta), rel=0.01)
    result = execute(run)
    assert len(result.selection_releases) == 1 and result.reported["step"] == T
