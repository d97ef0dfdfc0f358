"""Mean wall time of one training step per method, measured side by side in one process.

Every method is set up through its plugin exactly as `raco-bench train` would (default
hyperparameters, ε = 1, the given expected batch size; a full-batch method reads the whole training
split, and its row says so in the batch column), then timed in interleaved rounds (every
round runs each method for ``steps`` steps, in rotating order) so that drift of the machine affects
all of them alike. The table reports the mean and standard deviation over rounds of the mean ms per
step, and each method's ratio to DP-SGD. Two reference implementations of DP-SGD that are not part
of the suite (torch.func vmap, Opacus) can be added for context with ``--references``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import dataclass

import torch

from raco_bench.data import load_dataset
from raco_bench.methods import METHOD_NAMES, get_method, timing_reference
from raco_bench.privacy.counter_rng import Stream
from raco_bench.progress import Progress
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import prepare_run

DEFAULT_METHODS = METHOD_NAMES  # every registered method
REFERENCES = ("vmap-reference", "opacus-reference")  # logistic-regression DP-SGD written the usual ways, not suite methods


@dataclass
class Timing:
    method: str
    dataset: str
    batch_size: int
    ms_mean: float
    ms_sd: float
    rounds: int
    steps_per_round: int


def step_batch(method: str, ds, batch_size: int) -> int:
    """The batch a method's timed step reads: ``batch_size``, or the whole training split for a full-batch method."""
    return batch_size if method in REFERENCES or hasattr(get_method(method).Hyper(), "batch_size") else len(ds.train)


def _method_runner(method: str, ds, batch_size: int, seed: int, device: str):
    params = {"batch_size": batch_size} if step_batch(method, ds, batch_size) == batch_size else {}
    run = prepare_run(RunConfig(dataset=ds.name, method=method, device=device, params=params), ds)
    box = [run.method.init_state(run.ctx, Stream(seed, run.ctx.device))]

    def timed(steps: int) -> float:
        sync = torch.cuda.synchronize if run.ctx.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        state = box[0]
        for _ in range(steps):
            state = run.method.step(run.ctx, state)
        sync()
        box[0] = state
        return (time.perf_counter() - t0) * 1000 / steps

    return timed


def _reference_runner(kind: str, ds, batch_size: int, seed: int, device: str, clip: float = 1.0, sigma: float = 1.0):
    """Logistic-regression DP-SGD written the usual ways: torch.func vmap(grad), or Opacus' GradSampleModule."""
    import itertools

    torch.manual_seed(seed)
    dev = torch.device(device)
    X = torch.as_tensor(ds.train.X, device=dev)
    y = torch.as_tensor(ds.train.y, device=dev)
    n, q = len(X), batch_size / len(X)
    gen = torch.Generator(device=dev).manual_seed(seed)
    stream, steps_taken = Stream(seed, dev), itertools.count(1)  # the suite's Poisson sampler, as the methods use it
    model = torch.nn.Linear(X.shape[1], ds.n_classes).to(dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    if kind == "vmap-reference":
        from torch.func import functional_call, grad, vmap

        params = {k: v.detach() for k, v in model.named_parameters()}
        per_sample = vmap(grad(lambda p, x, t: loss_fn(functional_call(model, p, (x[None],)), t[None])), in_dims=(None, 0, 0))

        def step():
            idx = stream.batch(next(steps_taken), n, q)
            g = per_sample(params, X[idx], y[idx])
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            f = (clip / (norms + 1e-12)).clamp(max=1.0)
            for k, v in g.items():
                total = torch.einsum("b,b...->...", f, v) + sigma * clip * torch.randn(v.shape[1:], generator=gen, device=dev)
                params[k] = params[k] - 0.5 * total / batch_size
    else:
        import warnings

        try:
            from opacus import GradSampleModule
            from opacus.optimizers import DPOptimizer
        except ImportError:
            raise ImportError("the opacus-reference needs Opacus, an optional extra: pip install -e '.[opacus]'") from None

        warnings.filterwarnings("ignore")
        gsm = GradSampleModule(model)
        opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.5), noise_multiplier=sigma, max_grad_norm=clip, expected_batch_size=batch_size)

        def step():
            idx = stream.batch(next(steps_taken), n, q)
            opt.zero_grad()
            loss_fn(gsm(X[idx]), y[idx]).backward()
            opt.step()

    def timed(steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t0) * 1000 / steps

    return timed


def measure(datasets=("adult",), methods=DEFAULT_METHODS, batch_size=512, rounds=15, steps=200, warmup=100, device="cpu", seed=0) -> list[Timing]:
    out: list[Timing] = []
    progress = Progress("bench steptime", len(datasets) * len(methods) * (rounds + 1))
    for name in datasets:
        ds = load_dataset(name)
        runners = {m: (_reference_runner if m in REFERENCES else _method_runner)(m, ds, batch_size, seed, device) for m in methods}
        for m, run in runners.items():
            run(warmup)
            progress.advance(f"{name} {m} warm-up")
        samples: dict[str, list[float]] = {m: [] for m in methods}
        order = list(methods)
        for r in range(rounds):
            for m in order[r % len(order):] + order[: r % len(order)]:
                samples[m].append(runners[m](steps))
                progress.advance(f"{name} round {r + 1}/{rounds} {m}")
        for m in methods:
            out.append(Timing(m, name, step_batch(m, ds, batch_size), statistics.fmean(samples[m]), statistics.stdev(samples[m]) if rounds > 1 else 0.0,
                              rounds, steps))
    return out


def hardware() -> str:
    return f"{platform.machine()} CPU ({torch.get_num_threads()} torch threads), torch {torch.__version__}"


def format_table(timings: list[Timing], reference: str | None = None) -> str:
    reference = reference or timing_reference()
    lines = [f"| dataset | method | batch | ms/step (mean ± sd over rounds) | ratio to {reference} |", "|---|---|---|---|---|"]
    ref = {t.dataset: t.ms_mean for t in timings if t.method == reference}
    for t in timings:
        ratio = f"{t.ms_mean / ref[t.dataset]:.3f}" if t.dataset in ref else "n/a"
        lines.append(f"| {t.dataset} | {t.method} | {t.batch_size} | {t.ms_mean:.3f} ± {t.ms_sd:.3f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench steptime", description=__doc__)
    p.add_argument("--datasets", nargs="+", default=["adult", "credit"])
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=list(METHOD_NAMES) + list(REFERENCES))
    p.add_argument("--references", action="store_true", help="also time logistic-regression DP-SGD written with torch.func vmap and with Opacus")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    methods = list(args.methods) + (list(REFERENCES) if args.references else [])
    timings = measure(args.datasets, methods, args.batch_size, args.rounds, args.steps, device=args.device)
    print(f"hardware: {hardware()}")
    print(format_table(timings))
    return 0


def main_walltime(argv: list[str] | None = None) -> int:
    """`raco-bench bench walltime`: the same measurement, also logged to MLflow for `raco-bench report`."""
    from raco_bench.report.tables import WALLTIME_EXPERIMENT, log_walltime
    from raco_bench.tracking import resolve_tracking_uri

    p = argparse.ArgumentParser(prog="raco-bench bench walltime", description=main_walltime.__doc__)
    p.add_argument("--datasets", nargs="+", default=["adult", "credit"])
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=list(METHOD_NAMES))
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--device", default="cpu")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--experiment", default=WALLTIME_EXPERIMENT)
    args = p.parse_args(argv)
    uri = resolve_tracking_uri(args.tracking_uri)
    timings = measure(args.datasets, args.methods, args.batch_size, args.rounds, args.steps, device=args.device)
    print(f"hardware: {hardware()}")
    print(format_table(timings))
    run = log_walltime(uri, timings, hardware(), args.experiment, reference=timing_reference())
    print(f"logged to {uri}, experiment {args.experiment!r}, run {run}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
