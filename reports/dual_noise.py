"""How many steps RaCO-DP can take, and how noisy its dual signal is per step, at the top of its search space.

    python reports/dual_noise.py [--datasets parkinsons acs-employment adult] [--epsilons 0.5 1 3]

For each dataset, ε and batch size, at σ = 10 and Laplace scale b = 20 (the largest values the search space
draws, so the most steps the budget allows): T from the accountant (capped at 5,000, as the sweeps), and the
standard deviation of one step's noisy positive rate for the smallest and the largest group,
√2·b / (q·n_g): the Laplace noise on the group's histogram cell (Algorithm 1, line 3) over the group's expected
count in the batch. The multipliers move by dual_lr × (Γ̂ − γ) per step, so where this noise is many times
γ, λ follows the noise more than the constraint. Cited by results/README.md.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from raco_bench.data import load_dataset
from raco_bench.privacy.accounting import StepMechanism
from raco_bench.privacy.calibration import CalibrationCache, StepsProblem

SIGMA, LAPLACE, CAP, DELTA = 10.0, 20.0, 5000, 1e-5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["parkinsons", "acs-employment", "adult"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.5, 1.0, 3.0])
    parser.add_argument("--batches", nargs="+", type=int, default=[256, 1024])
    args = parser.parse_args()
    cache = CalibrationCache()
    print("| dataset | train rows | smallest / largest group | ε | B | T (σ = 10, b = 20) | rate noise per step, smallest group | largest group |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        ds = load_dataset(name, download=False)
        n = len(ds.train.y)
        sizes = np.bincount(ds.train.group)
        small, large = int(sizes[sizes > 0].min()), int(sizes.max())
        for eps in args.epsilons:
            for batch in args.batches:
                q = batch / n
                mech = StepMechanism(sampling_rate=q, noise_multiplier=SIGMA, laplace_scale=LAPLACE, histogram_batch="shared")
                steps = int(cache.solve(StepsProblem(mech, eps, DELTA, CAP)))
                noise = [math.sqrt(2) * LAPLACE / (q * g) for g in (small, large)]
                print(f"| {name} | {n:,} | {small:,} / {large:,} | {eps:g} | {batch} | {steps:,} | {noise[0]:.3g} | {noise[1]:.3g} |")


if __name__ == "__main__":
    main()
