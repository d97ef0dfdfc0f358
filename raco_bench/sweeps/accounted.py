"""Accounted hyperparameter tuning (``--tuning accounted``): random search whose privacy is part of the claim
(docs/sweeps.md, "Accounted tuning"; the accounting in docs/privacy.md, "Accounted tuning").

For each (method, ε, γ) and each of R independent repetitions, the sweep:

1. draws the number of configurations K from a truncated negative binomial (shape η, mean E[K];
   :func:`sample_tnb`), from a seed fixed before any data is read;
2. draws K configurations independently from the method's search space (the defaults are not
   favoured: every run is an independent copy of the same randomised algorithm);
3. trains each once with private checkpoint selection: each run releases its model and the noisy
   validation counts of its checkpoints (a Laplace release per checkpoint), inside its own budget;
4. releases the run with the best noisy validation accuracy among those whose noisy validation
   constraints hold (post-processing of what the runs released); none, if no run's do.

Papernot & Steinke's Theorem 2 bounds the release for a pair of orders (λ, λ̂) when every run is
(λ, ε)-RDP and (λ̂, ε̂)-RDP. The sweep fixes both values before any run: the reference run is the
method's default configuration at the largest T whose end-to-end ε (the theorem's bound, converted
to (ε, δ)) is the target ε (:func:`raco_bench.privacy.tuning.tuned_max_steps`), and the pair is the
one that gives it (:func:`raco_bench.privacy.tuning.release_orders`). Each drawn configuration then
trains for the largest T whose RDP at λ and at λ̂ is at most the reference's (:func:`dominated_steps`),
so the released model's end-to-end ε is at most the target, and that ε is what every run, the sweep
and the figures state. (Asking a run to stay under the whole reference curve would be valid too, but
a configuration whose curve has another shape, a smaller σ say, would then get almost no steps.)

The methods: those whose step the RDP accountant represents (:mod:`raco_bench.privacy.rdp`), RaCO-DP
and DP-SGD. Others are refused with the reason.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from raco_bench.methods import get_method
from raco_bench.methods.space import sample_configs
from raco_bench.privacy.rdp import ORDERS, RdpCurve, laplace_rdp, step_rdp
from raco_bench.privacy.tuning import release_orders, tnb_gamma, tuned_max_steps

TUNING_MODES = ("not-accounted", "accounted")
REPEAT_STRIDE = 100_000  # config_id = repeat · REPEAT_STRIDE + index: unique per (method, ε, γ)


def sample_tnb(shape: float, mean: float, rng: np.random.Generator) -> int:
    """K ≥ 1 from the truncated negative binomial of Papernot & Steinke with shape η and mean ``mean``:
    P(K = k) ∝ C(k + η − 1, k)(1 − γ)^k for k ≥ 1 (η = 0: the logarithmic distribution ∝ (1 − γ)^k / k)."""
    gamma = tnb_gamma(shape, mean)
    if shape == 0:
        return int(rng.logseries(1.0 - gamma))
    while True:  # numpy's negative binomial counts failures before η successes of probability γ; truncate at 0
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            return k


def supports_accounting(method_name: str) -> str | None:
    """None when accounted tuning can run ``method_name``, else why not."""
    method = get_method(method_name)
    if not method.private:
        return None  # a non-private method spends nothing to tune (it has no ε to state)
    if not hasattr(method, "step_mechanism"):
        return (f"accounted tuning needs the RDP curve of {method_name}'s run; the suite computes it for the Poisson-subsampled "
                "Gaussian and Laplace steps of raco-dp and dp-sgd; drop it with --methods, or sweep it with --tuning not-accounted")
    return None


@dataclass(frozen=True)
class Reference:
    """The RDP curve every run of one (method, ε) must stay under, and what the release then spends."""

    steps: int  # T of the reference run (the method's defaults)
    curve: RdpCurve
    orders: tuple[int, int]  # indices of (λ, λ̂) in the curve's orders
    epsilon_end_to_end: float  # of the released model (≤ the target)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def reference(spec, method_name: str, epsilon: float, n_train: int) -> Reference:
    method = get_method(method_name)
    defaults = sample_configs(method, 1, n_train, spec.sample_seed)[0]
    mech = method.step_mechanism(method.hyperparameters(defaults), n_train)
    T = tuned_max_steps(mech, epsilon, spec.delta, spec.tuning_mean, spec.tuning_shape, spec.selection, cap=spec.max_steps)
    if T == 0:
        raise ValueError(f"accounted tuning of {method_name} at epsilon={epsilon}: the budget does not allow one step of the default "
                         f"configuration with E[K]={spec.tuning_mean}; raise epsilon or lower --tuning-mean")
    curve = RdpCurve.of_run(mech, T, spec.selection)
    i, j, eps = release_orders(curve, spec.tuning_mean, spec.tuning_shape, spec.delta)
    return Reference(T, curve, (i, j), eps)


def dominated_steps(mech, ref: Reference, selection, cap: int) -> int:
    """The largest T ≤ ``cap`` whose run (T steps of ``mech`` and the selection's releases) is within the reference's RDP at
    its two orders λ and λ̂: T·ε_step(λ) + ε_sel(λ) ≤ ε_ref(λ) at both, so T is the smaller quotient."""
    orders = tuple(ORDERS[k] for k in ref.orders)
    step = step_rdp(mech, orders)
    sel = selection.count * laplace_rdp(selection.laplace_scale, orders) if selection is not None else np.zeros(len(orders))
    room = np.array([ref.curve.values[k] for k in ref.orders]) - sel
    if np.any(room < 0):
        return 0
    with np.errstate(divide="ignore"):
        bound = np.where(step > 0, room / step, math.inf)
    return int(min(cap, math.floor(float(bound.min()) * (1 - 1e-12))))


def accounted_trials(spec, n_train: int, make_trial) -> tuple[list[dict], dict]:
    """Every run of the accounted search, as trials (``make_trial(method, ε, γ, config_id, params, seed)``), and the references
    by (method, ε). Non-private methods are searched the same way (their tuning costs no privacy)."""
    trials, refs = [], {}
    note = (f"random search over K ~ TNB(η = {spec.tuning_shape:g}, E[K] = {spec.tuning_mean:g}) configurations, the best noisy validation "
            f"score released; {spec.tuning_repeats} independent repetitions")
    for method_name in spec.methods:
        why = supports_accounting(method_name)
        if why:
            raise ValueError(why)
        method = get_method(method_name)
        epsilons = list(spec.epsilons) if method.private else [None]
        gammas = list(spec.gammas) if method.gamma_is_input else [None]
        for eps in epsilons:
            ref = reference(spec, method_name, eps, n_train) if eps is not None else None
            refs[(method_name, eps)] = ref
            for gamma in gammas:
                for r in range(spec.tuning_repeats):
                    rng = np.random.default_rng(_seed(spec.sample_seed, method_name, eps, gamma, r))
                    K = sample_tnb(spec.tuning_shape, spec.tuning_mean, rng)
                    configs = sample_configs(method, K + 1, n_train, _seed(spec.sample_seed, method_name, eps, gamma, r, "configs"))[1:]
                    for i, params in enumerate(configs):
                        t = make_trial(method_name, eps, gamma, r * REPEAT_STRIDE + i, params, r * REPEAT_STRIDE + i)
                        t.update(repeat=r, tuning="accounted", tuning_runs=K, tuning_note=note)
                        if ref is not None:
                            T = dominated_steps(method.step_mechanism(method.hyperparameters(params), n_train), ref, spec.selection, spec.max_steps)
                            t["epsilon_end_to_end"] = ref.epsilon_end_to_end
                            if T == 0:
                                t["skip"] = "its run cannot take one step under the reference RDP curve"
                            else:
                                t["steps"] = T
                        trials.append(t)
    return trials, refs


@dataclass(frozen=True)
class Release:
    """What one repetition of the accounted search releases for (method, ε, γ)."""

    method: str
    epsilon: float | None
    gamma: float
    repeat: int
    runs: int  # K
    trial_key: str | None  # the released run; None when no run's noisy validation constraints held
    config_id: int | None
    val_accuracy: float | None  # the selection score: noisy for a private method, exact for a non-private one
    epsilon_end_to_end: float | None


def select_released(spec, results: list[dict]) -> list[Release]:
    """Per (method, ε, γ, repetition): the run with the best noisy validation accuracy among those noisily feasible at γ
    (a non-private method, which spends no budget, on its exact validation scores)."""
    out = []
    for method_name in spec.methods:
        method = get_method(method_name)
        for eps in (list(spec.epsilons) if method.private else [None]):
            for gamma in spec.gammas:
                trained_gamma = gamma if method.gamma_is_input else None
                for r in range(spec.tuning_repeats):
                    runs = [x for x in results if x["method"] == method_name and x["epsilon"] == eps and x["gamma"] == trained_gamma
                            and x.get("repeat") == r]
                    acc, con = ("noisy_val_accuracy", "noisy_val_max_constraint") if method.private else ("val_accuracy", "val_max_constraint")
                    ok = [x for x in runs if math.isfinite(x.get(acc, math.nan)) and x.get(con, math.inf) <= gamma]
                    best = max(ok, key=lambda x: (x[acc], -x["config_id"])) if ok else None
                    e2e = next((x.get("epsilon_end_to_end") for x in runs if x.get("epsilon_end_to_end") is not None), None)
                    out.append(Release(method_name, eps, gamma, r, len(runs), best["trial_key"] if best else None,
                                       best["config_id"] if best else None, best[acc] if best else None, e2e))
    return out
