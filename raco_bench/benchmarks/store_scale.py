"""`raco-bench bench store`: how long the store's ε takes, and how much memory, on a paper-size sweep; and how tight it is
against the bound it replaced (docs/privacy.md, "The store's ε").

The paper-size store has the structure of a study's sweep on Adult (issue 48's protocol: TPE searches of 200
configurations per cell, 5 γ, 5 phase-1 seeds, 20 phase-2 seeds of the winners): RaCO-DP searched per (ε, γ), so 1,000
configurations (σ ~ U(1, 10), s ~ U(1, 20), batch sizes as often as the study's search chose them, T the largest near
ε = 1 by the central-limit approximation of the subsampled Gaussian of the same mean loss, capped at 5,000 steps) and
DP-FERMI searched per ε, 200 configurations (σ for ε near 1 at T = 1,000, mostly B = 512 as in the study), every seed's
runs of one batch size drawing the same batches under one key. A sweep's rows hold each run's printed ε; here it is the
calibration's target, 1, and the runs' own PLD ε on a sample are printed beside it. The figures it prints for the docs are
measured here; nothing is assumed.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import time
from functools import lru_cache

import numpy as np
from dp_accounting import dp_event as ev
from scipy.stats import norm

from raco_bench.data.catalog import public_train_rows
from raco_bench.methods.common import batch_choices
from raco_bench.privacy import events
from raco_bench.privacy.store import StoreRelease, split_batched, store_epsilon

REVIEW_GROUPS = ((2, 5.0), (10, 5.0), (20, 10.0))  # (runs, Laplace scale) at σ = 4, B = 1024, T = 300 (issue 45's review)


@lru_cache(maxsize=16)
def _gdp_mu(epsilon: float, delta: float) -> float:
    """μ of the μ-GDP pair whose ε at ``delta`` is ``epsilon`` (bisection on its closed-form δ)."""
    lo, hi = 1e-6, 50.0
    for _ in range(100):
        mu = (lo + hi) / 2
        d = norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2)
        lo, hi = (mu, hi) if d < delta else (lo, mu)
    return lo


def _steps_near(epsilon: float, delta: float, q: float, precision: float, cap: int) -> int:
    """T at which T subsampled Gaussians of ``precision`` are near ``epsilon`` by the central limit (μ = q √(T (e^v − 1)))."""
    mu = _gdp_mu(epsilon, delta)
    return max(1, min(cap, int((mu / q) ** 2 / math.expm1(precision))))


RACO_BATCHES = {256: 0.26, 512: 0.44, 1024: 0.21, 2048: 0.05, 4096: 0.04}  # how often the study's RaCO-DP search chose each
FERMI_BATCHES = {256: 0.04, 512: 0.88, 1024: 0.03, 2048: 0.03, 4096: 0.02}  # and DP-FERMI's (Adult, issue 48's first repeat)


def paper_store(configs: int = 200, gammas: int = 5, seeds: int = 5, phase2_seeds: int = 20, winners: int = 10, delta: float = 1e-5,
                max_steps: int = 5000, seed: int = 0) -> list[StoreRelease]:
    """The releases of a paper-size sweep on Adult (module docstring), each with the calibration's target as its printed ε."""
    n = public_train_rows("adult")
    rng = np.random.default_rng(seed)
    mu = _gdp_mu(1.0, delta)

    def batch(weights: dict) -> int:
        sizes = [b for b in weights if b in batch_choices(n)]
        p = np.array([weights[b] for b in sizes])
        return int(rng.choice(sizes, p=p / p.sum()))

    def raco(c: tuple, s: int) -> StoreRelease:
        sigma, scale, b = c
        q = b / n
        steps = _steps_near(1.0, delta, q, sigma**-2 + scale**-2, max_steps)
        return StoreRelease(ev.SelfComposedDpEvent(events.SharedBatchStepEvent(q, sigma, scale), steps), ("key", s, b), f"raco-dp seed {s}",
                            epsilon=1.0)

    def fermi(b: int, s: int) -> StoreRelease:
        q, steps = b / n, 1000
        precision = math.log1p((mu / q) ** 2 / steps)  # both blocks together: σ/√2 each
        return StoreRelease(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(precision**-0.5)), steps), ("key", s, b),
                            f"dp-fermi seed {s}", epsilon=1.0)

    raco_configs = [(rng.uniform(1, 10), rng.uniform(1, 20), batch(RACO_BATCHES)) for _ in range(configs * gammas)]  # a search per γ
    fermi_configs = [batch(FERMI_BATCHES) for _ in range(configs)]
    out = []
    for s in range(seeds):
        out += [raco(c, s) for c in raco_configs] + [fermi(b, s) for b in fermi_configs]
    for s in range(seeds, seeds + phase2_seeds):
        out += [raco(c, s) for c in raco_configs[:winners]] + [fermi(b, s) for b in fermi_configs[:winners]]
    return out


def _sample_epsilons(releases: list[StoreRelease], delta: float, k: int = 20) -> list[float]:
    """The runs' own PLD ε (loss grid 1e-3) for ``k`` distinct events of the store: how near the calibration's target they are."""
    distinct = list(dict.fromkeys(r.event for r in releases))
    pick = np.random.default_rng(1).choice(len(distinct), size=min(k, len(distinct)), replace=False)
    return [events.epsilon(distinct[i], delta, discretization=1e-3) for i in pick]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def review_groups(delta: float = 1e-5) -> list[dict]:
    """Issue 45's review cases: K RaCO-DP runs on one stream, their histograms kept apart against one Laplace of summed 1/s."""
    q, sigma, steps = 1024 / public_train_rows("adult"), 4.0, 300
    rows = []
    for k, scale in REVIEW_GROUPS:
        run = ev.SelfComposedDpEvent(events.SharedBatchStepEvent(q, sigma, scale), steps)
        t0 = time.perf_counter()
        figure = store_epsilon([StoreRelease(run, "one stream", f"raco-dp {i}") for i in range(k)], delta)
        seconds = time.perf_counter() - t0
        summed = events.epsilon(ev.SelfComposedDpEvent(events.SharedBatchStepEvent(q, sigma / math.sqrt(k), scale / k), steps), delta)
        rows.append({"runs": k, "scale": scale, "exact": figure.composed, "summed_bound": summed, "independent": figure.independent,
                     "seconds": seconds})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", type=int, default=200, help="configurations per method (default: %(default)s)")
    p.add_argument("--gammas", type=int, default=5, help="RaCO-DP's gammas, each a run of every configuration (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=5, help="phase-1 seeds (default: %(default)s)")
    p.add_argument("--phase2-seeds", type=int, default=20, help="phase-2 seeds of each method's winners (default: %(default)s)")
    p.add_argument("--winners", type=int, default=10, help="winning configurations per method (default: %(default)s)")
    p.add_argument("--skip-review", action="store_true", help="only the paper-size store")
    args = p.parse_args(argv)
    delta = 1e-5
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    if not args.skip_review:
        for r in review_groups(delta):
            print(f"{r['runs']:3d} RaCO-DP runs on one stream (sigma 4, s {r['scale']:g}, B 1024, T 300): store epsilon {r['exact']:.3f} "
                  f"in {r['seconds']:.1f} s; one Laplace of summed 1/s (the earlier bound) {r['summed_bound']:.3f}, "
                  f"ratio {r['exact'] / r['summed_bound']:.2f}; own batches {r['independent']:.3f}", flush=True)
    t0 = time.perf_counter()
    releases = paper_store(args.configs, args.gammas, args.seeds, args.phase2_seeds, args.winners, delta)
    sample = _sample_epsilons(releases, delta)
    setup = time.perf_counter() - t0
    groups: dict = {}
    for r in releases:
        for part in split_batched(r.event)[0]:
            groups.setdefault((r.batches, part.sampling_rate), []).append(part.steps)
    largest = max(groups.values(), key=len)
    print(f"paper-size store: {len(releases):,} runs in {len(groups)} groups of runs that drew the same batches (the largest {len(largest)} "
          f"runs with {len(set(largest))} distinct T); each run's printed epsilon taken as 1, its own PLD epsilon "
          f"{min(sample):.2f}-{max(sample):.2f} on a sample of {len(sample)} (set up in {setup:.0f} s, not timed); peak memory before "
          f"{_peak_mb():.0f} MB", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    figure = store_epsilon(releases, delta)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  store epsilon {figure.epsilon:.5g} (loss grid {figure.discretization:g}), own batches {figure.independent:.5g}, largest run "
          f"{figure.largest_run:.4f}: {seconds:.1f} s wall, {cpu:.1f} CPU-seconds for both, peak memory {_peak_mb():.0f} MB", flush=True)
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    return 0
