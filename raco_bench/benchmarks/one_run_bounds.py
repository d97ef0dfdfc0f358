"""``raco-bench bench one-run``: the one-run audit's lower bounds side by side (docs/audit.md, "One run").

For each claimed ε it runs one audit (one training run of the configuration with m canaries, :mod:`raco_bench.audit.one_run`)
and prints, from the same canaries and guesses, the bounds ``--bounds`` names (default: the audit's, the Steinke–Nasr–Jagielski
bound and the f-DP bound of Mahloujifar, Melis & Chaudhuri under the (ε, δ) curve; ``fdp-gaussian``, under the Gaussian
trade-off hypothesis, only when named, and marked as a hypothesis), each f-DP bound over the SNJ one, and the audit's
wall time. Each audit is logged to MLflow (experiment ``raco-bench-audit``) unless ``--no-mlflow``;
``--save-scores DIR`` keeps each audit's scores and inclusions (one JSON file per ε) for re-analysis.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from raco_bench.audit.one_run import GAUSSIAN_HYPOTHESIS, OneRunAudit, run_one_run
from raco_bench.methods import DEFAULT_METHOD


def parse(argv: list[str]) -> argparse.Namespace:
    d = OneRunAudit()
    p = argparse.ArgumentParser(prog="raco-bench bench one-run", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", default=DEFAULT_METHOD, help="a private method with a record-level claim (default: %(default)s)")
    p.add_argument("--dataset", default=d.dataset, help="dataset (default: %(default)s)")
    p.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 8.0], help="claimed epsilons (default: %(default)s)")
    p.add_argument("--canaries", type=int, default=d.canaries, help="canaries m per audit (default: %(default)s)")
    p.add_argument("--confidence", type=float, default=d.confidence, help="confidence of every bound (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the audits' runs and canaries (default: %(default)s)")
    p.add_argument("--bounds", nargs="+", default=list(d.bounds), metavar="BOUND",
                   help="bounds to state, the first the headline: snj, fdp-dp, fdp-gaussian (a hypothesis) (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    p.add_argument("--save-scores", default=None, metavar="DIR", help="write each audit's scores and inclusions here (default: none)")
    p.add_argument("--tracking-uri", default=None, help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log the audits")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch

    from raco_bench import tracking
    from raco_bench.audit.records import log_audit

    args = parse(argv or [])
    torch.set_num_threads(args.threads)
    uri = None if args.no_mlflow else tracking.resolve_tracking_uri(args.tracking_uri)
    names = tuple(args.bounds)
    OneRunAudit(method=args.method, bounds=names).validate()  # a bad bound name fails before the first run
    ratios = [n for n in names if n.startswith("fdp") and "snj" in names]
    shown = {n: n + ("*" if n == "fdp-gaussian" else "") for n in names}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"one-run audit of {args.method} on {args.dataset}, {args.canaries} canaries, {args.confidence:.0%} confidence; "
          f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, load average {load:.1f} at the start")
    if "fdp-gaussian" in names:
        print(f"* fdp-gaussian: {GAUSSIAN_HYPOTHESIS}")
    print(f"{'claimed':>8} {'steps':>6} " + " ".join(f"{shown[n]:>13}" for n in names) + "".join(f" {shown[n] + '/snj':>17}" for n in ratios)
          + f" {'seconds':>8}")
    for eps in args.epsilons:
        audit = OneRunAudit(method=args.method, dataset=args.dataset, epsilon=eps, canaries=args.canaries, confidence=args.confidence,
                            seed=args.seed, bounds=names)
        result = run_one_run(audit)
        b = {n: result.bounds[n].epsilon_lower for n in names}
        ratio = {n: b[n] / b["snj"] if b["snj"] > 0 else float("nan") for n in ratios}
        print(f"{result.claimed_epsilon:>8.3f} {result.steps:>6d} " + " ".join(f"{b[n]:>13.3f}" for n in names)
              + "".join(f" {ratio[n]:>17.2f}" for n in ratios) + f" {result.seconds:>8.0f}", flush=True)
        if args.save_scores:
            Path(args.save_scores).mkdir(parents=True, exist_ok=True)
            (Path(args.save_scores) / f"one_run_{args.method}_eps{eps:g}_m{args.canaries}_seed{args.seed}.json").write_text(
                json.dumps(result.score_record()))
        if uri is not None:
            log_audit(uri, "one-run", result.params(), result.metrics(), result.note())
    return 0
