"""``raco-bench bench tuning``: what accounted tuning leaves a run, under the privacy-profile bound and under the RDP theorem
(docs/privacy.md, "Accounted tuning", the T table).

For each distribution of K (a truncated negative binomial of shape η, or a Poisson when η = inf) and each mean E[K], it
prints the knob value (T for RaCO-DP) that a search whose every run is the method's default configuration may spend while
its released model stays within ε end to end, by Papernot & Steinke's RDP theorem (Theorem 2, 6 for a Poisson K) and by
the privacy-profile bound (1) of :mod:`raco_bench.privacy.tuning_profile`, beside what one untuned run gets, and the
profile bound's T over the RDP theorem's. ``--checkpoint last`` counts the training steps only; ``private`` adds each run's
private checkpoint selection (the Laplace releases an accounted sweep's runs make), which is what a sweep's reference run
gets. No data is read: every figure is accounting, computed from n_train, the catalog's published split size.
"""

from __future__ import annotations

import argparse
import platform
import time

from raco_bench.benchmarks import private_method_on
from raco_bench.methods import DEFAULT_METHOD
from raco_bench.methods.base import Budget
from raco_bench.methods.space import sample_configs
from raco_bench.privacy.accounting import SelectionRelease
from raco_bench.privacy.rounds import POISSON, Rounds
from raco_bench.privacy.tuning import repeat_and_select
from raco_bench.privacy.tuning_profile import search_epsilon


def parse(argv: list[str]) -> argparse.Namespace:
    from raco_bench.training.config import RunConfig

    run = RunConfig()
    p = argparse.ArgumentParser(prog="raco-bench bench tuning", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", default=DEFAULT_METHOD, help="a private method (default: %(default)s)")
    p.add_argument("--dataset", default="adult", help="its published training-split size sets q = B/n (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=1.0, help="end-to-end epsilon of the released model (default: %(default)s)")
    p.add_argument("--delta", type=float, default=run.delta, help="delta (default: %(default)s)")
    p.add_argument("--means", type=float, nargs="+", default=[5.0, 10.0, 20.0], help="E[K] values (default: %(default)s)")
    p.add_argument("--shapes", type=float, nargs="+", default=[1.0, POISSON], help="eta of K's distribution; inf = Poisson (default: 1 inf)")
    p.add_argument("--checkpoint", nargs="+", default=["last", "private"], choices=["last", "private"],
                   help="last: the training steps only; private: with the run's private selection releases (default: both)")
    p.add_argument("--max-steps", type=int, default=run.max_steps, help="the largest T (default: %(default)s)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from raco_bench.sweeps.accounted import RunFamily
    from raco_bench.training.config import RunConfig

    args = parse(argv or [])
    method, n_train = private_method_on(args.method, args.dataset, "its tuning spends nothing")
    run = RunConfig()
    defaults = sample_configs(method, 1, n_train, 0)[0]
    print(f"accounted tuning of {args.method}'s default configuration on {args.dataset} (n = {n_train}) at end-to-end epsilon "
          f"{args.epsilon:g}, delta {args.delta:g}; {platform.processor() or platform.machine()}")
    print(f"{'releases':<22} {'K':<30} {'knob':<17} {'untuned':>8} {'RDP':>8} {'profile':>8} {'profile/RDP':>12} {'eps (profile, RDP)':>20} {'seconds':>8}")
    for checkpoint in args.checkpoint:
        selection = SelectionRelease(run.selection_noise, run.selection_checkpoints) if checkpoint == "private" else None
        family = RunFamily.of(method, defaults, n_train, Budget(args.epsilon, args.delta, args.max_steps, None, selection))
        if family.problem is None:
            raise ValueError(f"method {args.method!r} has no tuning knob to calibrate")
        untuned = family.problem.solve()
        label = "steps + selection" if selection is not None else "steps only"
        for shape in args.shapes:
            for mean in args.means:
                rounds = Rounds.of(mean, shape)
                t0 = time.perf_counter()
                rdp = family.most_within(lambda e: repeat_and_select(_curve(e), mean, shape).epsilon(args.delta) <= args.epsilon)
                prof = family.most_within(lambda e: search_epsilon(e, rounds, args.delta)[0] <= args.epsilon)
                e_prof = search_epsilon(family.event(prof), rounds, args.delta)[0]
                e_rdp = repeat_and_select(family.curve(rdp), mean, shape).epsilon(args.delta)
                print(f"{label:<22} {rounds.describe():<30} {family.problem.knob.name:<17} {untuned:>8.4g} {rdp:>8.4g} {prof:>8.4g} "
                      f"{_ratio(family.problem.knob, prof, rdp):>12.2f} {f'{e_prof:.3f}, {e_rdp:.3f}':>20} {time.perf_counter() - t0:>8.0f}",
                      flush=True)
    return 0


def _curve(event):
    from raco_bench.privacy import events
    from raco_bench.privacy.rdp import ORDERS, RdpCurve

    return RdpCurve(ORDERS, tuple(float(x) for x in events.rdp(event)))


def _ratio(knob, profile: float, rdp: float) -> float:
    """How much more the profile bound allows: T or a budget ρ over the RDP theorem's; for a noise multiplier, RDP's over the profile's."""
    return profile / rdp if knob.increasing else rdp / profile
