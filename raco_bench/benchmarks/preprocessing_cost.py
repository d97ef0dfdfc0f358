"""The accuracy cost of private preprocessing: public feature domains against the papers' z-scoring.

For each method and each preprocessing mode, every learning rate in ``--lrs`` is trained with
``--seeds`` seeds at the given (ε, δ) and γ, with the method's other defaults and the private
last-iterate checkpoint. The learning rate with the best mean validation accuracy is kept for each
(method, mode), so each mode gets the same small, symmetric tuning; the table reports its test
accuracy and test constraint violation (mean ± sd over seeds) and the difference public − paper.
Tuning is not privacy-accounted here either.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from raco_bench.data import load_dataset
from raco_bench.methods import get_method, registry
from raco_bench.progress import Progress
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import train


def _runs(ds, method: str, mode: str, lr: float, seeds: int, args, progress: Progress) -> list:
    keys = get_method(method).learning_rate_keys
    cfg = RunConfig(dataset=args.dataset, method=method, gamma=args.gamma, epsilon=args.epsilon, delta=args.delta, preprocessing=mode,
                    eval_every=10**6, params={k: lr for k in keys})
    out = []
    for seed in range(seeds):
        out.append(train(RunConfig(**{**cfg.to_dict(), "seed": seed}), ds))
        progress.advance(f"{method} {mode} lr={lr:g} seed {seed}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench preprocessing", description=__doc__)
    p.add_argument("--dataset", default="adult")
    p.add_argument("--methods", nargs="+", default=[n for n, cls in registry().items() if cls.private], help="default: every private method")
    p.add_argument("--lrs", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--gamma", type=float, default=0.05)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    data = {mode: load_dataset(args.dataset, preprocessing=mode) for mode in ("public", "paper")}
    print(f"{args.dataset}, epsilon = {args.epsilon}, delta = {args.delta:g}, gamma = {args.gamma}, last iterate, "
          f"{args.seeds} seeds, learning rate chosen per (method, mode) on mean validation accuracy from {args.lrs}")
    print("| method | preprocessing | lr | test accuracy | test violation | epsilon spent |")
    print("|---|---|---|---|---|---|")
    progress = Progress("bench preprocessing", len(args.methods) * len(data) * len(args.lrs) * args.seeds, every=30.0)
    for method in args.methods:
        best = {}
        for mode, ds in data.items():
            trials = {lr: _runs(ds, method, mode, lr, args.seeds, args, progress) for lr in args.lrs}
            lr = max(trials, key=lambda k: statistics.mean(r.last["val"]["accuracy"] for r in trials[k]))
            acc = [r.last["test"]["accuracy"] for r in trials[lr]]
            viol = [r.last["test"]["max_violation"] for r in trials[lr]]
            best[mode] = statistics.mean(acc)
            print(f"| {method} | {mode} | {lr:g} | {statistics.mean(acc):.4f} ± {statistics.stdev(acc):.4f} | "
                  f"{statistics.mean(viol):.4f} ± {statistics.stdev(viol):.4f} | {trials[lr][0].privacy['epsilon_spent']:.4f} |", flush=True)
        print(f"| {method} | public − paper | | {best['public'] - best['paper']:+.4f} | | |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
