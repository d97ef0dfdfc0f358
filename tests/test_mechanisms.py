"""Statistical checks of every noise, clipping and sampling path of the training step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from raco_bench.constraints import demographic_parity
from raco_bench.data.tensors import TrainData
from raco_bench.methods.lagrangian.step import StepSettings, TrainState, sgda_step
from raco_bench.models import MLP, LogisticRegression
from raco_bench.objective import lagrangian_residual, lagrangian_value, tempered_softmax
from raco_bench.privacy.counter_rng import Stream


def _toy_data(n=40, d=3, c=2, G=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    X = 3 * torch.randn(n, d, generator=gen, dtype=torch.float64)
    y = torch.randint(0, c, (n,), generator=gen)
    group = torch.randint(0, G, (n,), generator=gen)
    problem = demographic_parity(G, c, 0.05)
    parts = torch.as_tensor(problem.partition.assign(y.numpy(), group.numpy()))
    data = TrainData.build(X, y, c, parts, problem.partition.n_parts)
    return data, problem.compile(dtype=torch.float64), problem


def _onehot(data):
    return data.labels_onehot(data.table)


def _parts(data):
    return data.parts_onehot(data.table).argmax(1)


def _settings(n, private=True, **kw):
    base = dict(sampling_rate=1.0, expected_batch=float(n), clip_norm=0.5 if private else None, noise_std=(2.0 * 0.5) if private else 0.0,
                laplace_scale=3.0 if private else None, temperature=1.5, lr=1.0, dual_lr=0.2)
    base.update(kw)
    return StepSettings(**base)


def _state(model, data, J, seed):
    params = {k: v.double() for k, v in model.init(Stream(seed)).items()}
    return TrainState(params, torch.full((J,), 0.7, dtype=torch.float64), torch.zeros(J, dtype=torch.float64), 0, Stream(seed))


def _batches(n: int, q: float, draws: int, seed: int = 0) -> list[torch.Tensor]:
    """The production sampler: step t of a run seeded ``seed`` draws its batch from the stream (seed, t)."""
    stream = Stream(seed)
    return [stream.batch(t, n, q) for t in range(1, draws + 1)]


@pytest.mark.parametrize("n,q", [(2000, 0.03), (300, 0.5), (50, 0.97)])
def test_poisson_batch_sizes_are_binomial(n, q):
    draws = 4000
    sizes = np.array([len(b) for b in _batches(n, q, draws)])
    mean_se = np.sqrt(n * q * (1 - q) / draws)
    assert abs(sizes.mean() - n * q) < 4 * mean_se
    assert sizes.var(ddof=1) == pytest.approx(n * q * (1 - q), rel=0.1)
    # goodness of fit against Binomial(n, q) on bins of roughly equal expected mass
    lo, hi = stats.binom.ppf([0.02, 0.98], n, q)
    edges = np.unique(np.linspace(lo, hi, 12).round())
    observed = np.histogram(sizes, bins=np.concatenate([[-0.5], edges + 0.5, [n + 0.5]]))[0]
    cdf = stats.binom.cdf(np.concatenate([edges, [n]]), n, q)
    expected = draws * np.diff(np.concatenate([[0.0], cdf]))
    keep = expected > 0
    assert observed[~keep].sum() == 0
    assert stats.chisquare(observed[keep], expected[keep]).pvalue > 1e-3


def test_poisson_membership_is_independent_with_rate_q():
    """Every index is kept with probability q, independently of its neighbours (what the gaps sampler must preserve)."""
    n, q, draws = 200, 0.1, 20_000
    masks = torch.zeros(draws, n)
    for t, batch in enumerate(_batches(n, q, draws, seed=1)):
        masks[t, batch] = 1
    rate = masks.mean(0)
    assert float((rate - q).abs().max()) < 5 * np.sqrt(q * (1 - q) / draws)
    joint = (masks[:, :-1] * masks[:, 1:]).mean(0)  # P(i and i+1 both kept) = q²
    assert float(joint.mean()) == pytest.approx(q * q, rel=0.03)
    assert float(((masks[:, :-1] - q) * (masks[:, 1:] - q)).mean()) == pytest.approx(0.0, abs=3e-4)


def test_gap_sampler_and_coin_flips_agree_in_distribution():
    n, q, draws = 1000, 0.02, 3000
    gen = torch.Generator().manual_seed(2)
    a = np.array([len(b) for b in _batches(n, q, draws, seed=2)])
    b = np.array([int((torch.rand(n, generator=gen) < q).sum()) for _ in range(draws)])  # n coin flips, the reference form
    assert stats.ks_2samp(a, b).pvalue > 1e-3
    assert len(Stream(0).batch(1, n, 1.0)) == n


def test_empty_batch_is_a_valid_step():
    data, rates, problem = _toy_data(n=20)
    model = LogisticRegression(3, 2)
    state = _state(model, data, problem.n_constraints, 1)
    s = _settings(20, sampling_rate=1e-9, expected_batch=1e-9 * 20)
    new, release = sgda_step(state, data, model, s, rates)
    assert all(torch.isfinite(v).all() for v in new.params.values())
    assert torch.isfinite(release.constraint_estimates).all()
    # the step still releases noise: parameters moved although the batch was empty
    assert not torch.equal(new.params["weight"], state.params["weight"])


def test_laplace_noise_has_the_stated_scale():
    z = 2.5 * Stream(0).laplace(1, 200_000, dtype=torch.float64).numpy()
    assert np.abs(z).mean() == pytest.approx(2.5, rel=0.01)  # E|Lap(0,b)| = b
    assert stats.kstest(z, "laplace", args=(0, 2.5)).pvalue > 1e-3


def _exact_histogram(model, state, data, rates, s):
    probs = tempered_softmax(model.logits(state.params, data.X), s.temperature)
    if s.dual_update == "hard":
        probs = torch.nn.functional.one_hot(probs.argmax(1), probs.shape[1]).to(probs.dtype)
    return rates.histogram(probs, _parts(data))


@pytest.mark.parametrize("hist_mode,dual", [("shared", "soft"), ("independent", "soft"), ("shared", "hard")])
def test_histogram_noise_in_the_step_has_scale_s_L_and_vanishes_without_privacy(hist_mode, dual):
    """With q = 1 the histogram batch is the whole data set: Ĥ − H must be iid Laplace(0, s_L)
    (for the hard dual update H is the one-hot argmax histogram, the only one released)."""
    data, rates, problem = _toy_data(n=30)
    model = LogisticRegression(3, 2)
    private = _settings(30, histogram_batch=hist_mode, dual_update=dual)
    diffs = []
    for seed in range(2500):
        state = _state(model, data, problem.n_constraints, seed)
        exact = _exact_histogram(model, state, data, rates, private)
        _, release = sgda_step(state, data, model, private, rates)
        diffs.append((release.histogram - exact).reshape(-1))
    diffs = torch.cat(diffs).numpy()
    assert stats.kstest(diffs, "laplace", args=(0, private.laplace_scale)).pvalue > 1e-3
    assert np.abs(diffs).mean() == pytest.approx(private.laplace_scale, rel=0.03)
    off = _settings(30, private=False, dual_update=dual)
    state = _state(model, data, problem.n_constraints, 0)
    exact = _exact_histogram(model, state, data, rates, off)
    torch.testing.assert_close(sgda_step(state, data, model, off, rates)[1].histogram, exact)


@pytest.mark.parametrize("model_kind", ["logistic", "mlp"])
def test_gaussian_noise_in_the_step_has_std_sigma_C(model_kind):
    """With q = 1 the batch is the whole data set, so update = −(lr/B)(clipped sum + noise): recover the noise."""
    data, rates, problem = _toy_data(n=25)
    model = LogisticRegression(3, 2) if model_kind == "logistic" else MLP(3, 2, hidden=4)
    s = _settings(25)
    noises = []
    for seed in range(300):
        state = _state(model, data, problem.n_constraints, seed)
        state.lam.zero_()  # λ = 0: the clipped sum does not depend on the histogram noise
        new, _ = sgda_step(state, data, model, s, rates)
        if isinstance(model, LogisticRegression):
            probs = tempered_softmax(model.logits(state.params, data.X), s.temperature)
            clipped = model.clipped_grad_sum(state.params, data.X, lagrangian_residual(probs, _onehot(data), None, s.temperature), s.clip_norm)
        else:
            objective = lambda z, yi, ci: lagrangian_value(z, yi, ci, s.temperature)  # noqa: E731
            clipped = model.clipped_grad_sum_of(state.params, data.X, objective, data.y, torch.zeros(25, 2, dtype=torch.float64), s.clip_norm)
        for k in state.params:
            z = (state.params[k] - new.params[k]) * s.expected_batch / s.lr - clipped[k]
            noises.append(z.reshape(-1))
    z = torch.cat(noises).numpy()
    assert z.std() == pytest.approx(s.noise_std, rel=0.05)
    assert abs(z.mean()) < 4 * s.noise_std / np.sqrt(z.size)
    assert stats.kstest(z / s.noise_std, "norm").pvalue > 1e-3


def test_no_gaussian_noise_without_privacy():
    data, rates, problem = _toy_data(n=25)
    model = LogisticRegression(3, 2)
    s = _settings(25, private=False)
    state = _state(model, data, problem.n_constraints, 0)
    state.lam.zero_()
    new, _ = sgda_step(state, data, model, s, rates)
    probs = tempered_softmax(model.logits(state.params, data.X), s.temperature)
    full = model.clipped_grad_sum(state.params, data.X, lagrangian_residual(probs, _onehot(data), None, s.temperature), None)
    for k in state.params:
        torch.testing.assert_close(new.params[k], state.params[k] - s.lr / s.expected_batch * full[k])


def _single_example_grads(model, params, x, y, coef, tau):
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    value = lagrangian_value(model.logits(p, x[None])[0], y, coef, tau)
    return dict(zip(p, torch.autograd.grad(value, list(p.values()))))


@pytest.mark.parametrize("model_kind", ["logistic", "mlp"])
def test_per_sample_gradients_equal_autograd_on_single_examples(model_kind):
    data, rates, problem = _toy_data(n=12, d=4)
    model = LogisticRegression(4, 2) if model_kind == "logistic" else MLP(4, 2, hidden=5)
    state = _state(model, data, problem.n_constraints, 3)
    tau = 1.7
    coef = 30 * rates.part_coefficients(state.lam, torch.tensor([5.0, 7.0], dtype=torch.float64))[_parts(data)]
    if isinstance(model, LogisticRegression):
        probs = tempered_softmax(model.logits(state.params, data.X), tau)
        grads = model.per_sample_grads(state.params, data.X, lagrangian_residual(probs, _onehot(data), coef, tau))
    else:
        grads = model.per_sample_grads_of(state.params, data.X, lambda z, yi, ci: lagrangian_value(z, yi, ci, tau), data.y, coef)
    for i in range(12):
        ref = _single_example_grads(model, state.params, data.X[i], data.y[i], coef[i], tau)
        for k in ref:
            torch.testing.assert_close(grads[k][i], ref[k])


@pytest.mark.parametrize("model_kind", ["logistic", "mlp"])
def test_clipped_per_sample_gradients_have_norm_at_most_C(model_kind):
    data, rates, problem = _toy_data(n=50, d=4)
    model = LogisticRegression(4, 2) if model_kind == "logistic" else MLP(4, 2, hidden=5)
    state = _state(model, data, problem.n_constraints, 4)
    coef = 50 * rates.part_coefficients(state.lam, torch.tensor([20.0, 30.0], dtype=torch.float64))[_parts(data)]
    tau, C = 1.0, 0.3
    if isinstance(model, LogisticRegression):
        r = lagrangian_residual(tempered_softmax(model.logits(state.params, data.X), tau), _onehot(data), coef, tau)
        grads = model.per_sample_grads(state.params, data.X, r)
        fast = model.clipped_grad_sum(state.params, data.X, r, C, data.sq_norms(data.table))
    else:
        obj = lambda z, yi, ci: lagrangian_value(z, yi, ci, tau)  # noqa: E731
        grads = model.per_sample_grads_of(state.params, data.X, obj, data.y, coef)
        fast = model.clipped_grad_sum_of(state.params, data.X, obj, data.y, coef, C)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    assert (norms > C).sum() > 10  # the test exercises clipping
    factor = torch.clamp(C / norms, max=1.0)
    clipped_norms = norms * factor
    assert float(clipped_norms.max()) <= C * (1 + 1e-9)
    for k, g in grads.items():
        torch.testing.assert_close(fast[k], torch.tensordot(factor, g, dims=1))
