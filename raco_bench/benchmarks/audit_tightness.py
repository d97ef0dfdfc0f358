"""``raco-bench bench audit``: how tight the white-box audit is, and how fast (docs/audit.md, "Benchmark").

For each method it audits one configuration at the claimed ε (default 1) and prints, side by side, the
audited lower bound ε̂, its ratio to the claim, what the same number of runs reaches on an exact
implementation of the claim, and the wall time. Each audit is logged to MLflow (experiment
``raco-bench-audit``) unless ``--no-mlflow``, so that ``raco-bench report`` shows it.
"""

from __future__ import annotations

import argparse
import platform

from raco_bench.audit.whitebox import WhiteBoxAudit, auditable, run_whitebox
from raco_bench.methods import DEFAULT_METHOD


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raco-bench bench audit", description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=[DEFAULT_METHOD], choices=list(auditable()), help="methods to audit (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=1.0, help="claimed ε (default: %(default)s)")
    p.add_argument("--runs", type=int, default=1_000_000, help="runs per world (default: %(default)s)")
    p.add_argument("--sampling-rate", type=float, default=1.0, help="q of the audited runs; 0 = the configuration's own (default: %(default)s)")
    p.add_argument("--rows", type=int, default=256, help="training rows of D (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    p.add_argument("--tracking-uri", default=None, help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log the audits")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    import torch

    from raco_bench import tracking
    from raco_bench.audit.records import log_audit

    args = parse(argv)
    torch.set_num_threads(args.threads)
    uri = None if args.no_mlflow else tracking.resolve_tracking_uri(args.tracking_uri)
    print(f"white-box audit, claimed epsilon {args.epsilon}, {args.runs} runs per world, {args.rows} rows, "
          f"q = {args.sampling_rate or 'the configuration'}; {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"{'method':<10} {'claimed':>8} {'audited':>8} {'ratio':>6} {'exact claim':>12} {'audited/exact':>14} {'seconds':>8}")
    for method in args.methods:
        audit = WhiteBoxAudit(method=method, epsilon=args.epsilon, runs=args.runs, rows=args.rows, sampling_rate=args.sampling_rate or None)
        r = run_whitebox(audit)
        e, c, ideal = r.bound.epsilon_lower, r.claimed_epsilon, r.ideal.epsilon_lower
        print(f"{method:<10} {c:>8.3f} {e:>8.3f} {e / c:>6.2f} {ideal:>12.3f} {e / ideal if ideal else float('nan'):>14.2f} {r.seconds:>8.0f}", flush=True)
        if uri is not None:
            log_audit(uri, "whitebox", r.params(), r.metrics(), r.note())
    return 0
