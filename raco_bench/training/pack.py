"""Train a pack: K prepared runs (``raco_bench.training.loop.prepare_run``) in lockstep, each ending with
the same :class:`~raco_bench.training.loop.RunResult` it would get alone.

Each configuration keeps its own evaluation steps (step 1, every ``eval_every``, its own T, its
private-selection checkpoints), its checkpoint rule and its result; the recorder that does this is
the same one a single run uses (:class:`~raco_bench.training.loop.RunRecorder`). Evaluations due
at the same step are one batched pass of those models over each split, a chunk of rows at a time
(:func:`~raco_bench.training.evaluation.evaluate_linear`).

Which runs can share a pack: runs of one method whose plugin names a batched engine (``Method.engine``,
the protocol in :mod:`raco_bench.packs.engine`) that accepts them (:meth:`Engine.blocker`), on the same
training tensors, constraint structure, device and word source, with equal engine keys
(:meth:`Engine.pack_key`). Any other run trains alone through ``execute``, inside the same call, so a
caller never needs to know which is which (:func:`train_runs`). The driver knows no method by name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from raco_bench.packs.allocator import keep_freed_memory
from raco_bench.packs.rows import RowProducts
from raco_bench.training.evaluation import counts_on_device, counts_to_host, evaluate_linear, linear_logits, metrics_of_counts, on_host
from raco_bench.training.loop import Run, RunRecorder, RunResult, execute, snapshot


@dataclass
class PackCheckpoint:
    """Where a pack keeps its state while it trains: ``save(state)`` stores a state, ``restored`` is the state an
    earlier attempt saved (None: start at step 1), ``every_s`` the seconds between saves. The state holds the
    engine's tensors, the step, the step times and every configuration's recorder (docs/packs.md, "Checkpoints")."""

    save: Callable[[dict], None]
    restored: dict | None = None
    every_s: float = 60.0


def pack_blocker(run: Run) -> str | None:
    """None if ``run`` can join a pack, else why not: its method names no batched engine, or the engine refuses it."""
    engine = run.method.engine
    if engine is None:
        return f"method {run.method.name} has no batched engine yet"
    return engine.blocker(run)


def _compatible(a: Run, b: Run) -> bool:
    same_rates = (a.ctx.rates is None) == (b.ctx.rates is None) and (
        a.ctx.rates is None or (torch.equal(a.ctx.rates.membership, b.ctx.rates.membership) and torch.equal(a.ctx.rates.weights, b.ctx.rates.weights)))
    return (type(a.method) is type(b.method) and a.ctx.dataset is b.ctx.dataset
            and a.ctx.device == b.ctx.device and a.ctx.source is b.ctx.source and same_rates and set(a.evals) == set(b.evals)
            and a.method.engine.pack_key(a) == b.method.engine.pack_key(b))


@torch.inference_mode()
def train_pack(runs: list[Run], progress: Callable[[int, dict], None] | None = None, products: RowProducts | None = None,
               checkpoint: PackCheckpoint | None = None, ahead: bool | None = None, graph: bool | None = None) -> list[RunResult]:
    """Train compatible runs in lockstep; ``progress(k, entry)`` sees each configuration's evaluations.
    ``products`` picks how batch rows are multiplied (:mod:`raco_bench.packs.rows`; default: by device).
    ``checkpoint`` saves the pack's state every ``checkpoint.every_s`` seconds and continues from a saved state: every
    draw is a function of (stream, step), so a resumed pack ends exactly as an uninterrupted one (docs/packs.md).
    ``ahead`` asks an engine that can (``Engine.runs_ahead``) for the step a device runs ahead on (default: by device;
    docs/packs.md, "The GPU path"): nothing is then read back between evaluations, the step times are shared out at
    each evaluation, and an evaluation reads every split's counts back at once. ``graph`` asks such an engine to replay
    that step as a CUDA graph (default: on CUDA; docs/packs.md, "Graphed steps").

    A pack runs in torch's inference mode: batched engines compute their gradients in closed form and never use autograd,
    and without its bookkeeping each of a step's small operations costs less (docs/packs.md, "Speed"). The parameters a
    pack returns are numpy (:func:`~raco_bench.training.loop.snapshot`); its other tensors (private selection's noisy
    counts) are inference tensors, to be read, not updated in place."""
    for r in runs:
        why = pack_blocker(r)
        if why is not None:
            raise ValueError(f"run {r.ctx.config.method} seed {r.ctx.config.seed} cannot join a pack: {why}")
        if not _compatible(runs[0], r):
            raise ValueError("a pack holds runs of one method (and one engine key, e.g. a privacy mode) on the same training data, constraints, "
                             "device and word source "
                             "(prepare its runs with one Keystream: prepare_run(..., source=...))")
    first = runs[0]
    ctx0 = first.ctx
    keep_freed_memory()  # a step's arrays stay mapped from one step to the next (raco_bench/packs/allocator.py)
    kind = first.method.engine
    if ahead and not kind.runs_ahead:
        raise ValueError(f"method {first.method.name}'s engine has no step a device runs ahead on (ahead=True)")
    if graph and not kind.runs_ahead:
        raise ValueError(f"method {first.method.name}'s engine has no step to replay as a graph (graph=True)")
    engine = kind(runs, products, ahead=ahead, graph=graph) if kind.runs_ahead else kind(runs, products)
    runs_ahead = engine.ahead is not None
    K = len(runs)
    recorders = [RunRecorder(r, (lambda entry, k=k: progress(k, entry)) if progress else None) for k, r in enumerate(runs)]
    T = np.asarray(engine.steps.tolist())  # read once, before the first step
    step_time = np.zeros(K)  # each step's time, shared by the configurations it trained
    eval_time = np.zeros(K)  # each batched evaluation's time, shared by the configurations it evaluated
    start, last_save, T_max = 1, time.monotonic(), int(T.max())
    if checkpoint is not None and checkpoint.restored is not None:
        saved = checkpoint.restored
        engine.state, step_time, start = saved["engine"], np.asarray(saved["step_time"], dtype=np.float64), int(saved["step"]) + 1
        eval_time = np.asarray(saved.get("eval_time", eval_time), dtype=np.float64)
        for k, rec in enumerate(recorders):
            rec.restore(saved["recorders"][k])
            for entry in rec.history if progress else ():  # live curves: points already stored are skipped, lost ones sent again
                progress(k, entry)
    due_at: dict[int, list[int]] = {}  # each step's evaluations, found once (a step asks no recorder)
    for k, rec in enumerate(recorders):
        for t in rec.eval_at:
            due_at.setdefault(t, []).append(k)
    queued = _Queued(K)  # ahead: the steps taken since the last read, whose time is known only at the next one
    host = _HostSplits.of(first) if runs_ahead else None
    for t in range(start, T_max + 1):
        if checkpoint is not None and t > start and time.monotonic() - last_save >= checkpoint.every_s:
            engine.settle()
            queued.flush(step_time)
            checkpoint.save({"step": t - 1, "engine": engine.state, "step_time": step_time, "eval_time": eval_time,
                             "recorders": [r.snapshot() for r in recorders]})
            last_save = time.monotonic()
            queued.restart()
        t0 = time.perf_counter()
        engine.step()
        live = T >= t
        if runs_ahead:
            queued.add(live)
        else:
            step_time[live] += (time.perf_counter() - t0) / int(live.sum())
        due = sorted(due_at.get(t, ()))
        if not due:
            continue
        engine.settle()
        queued.flush(step_time)
        t0 = time.perf_counter()
        weight, bias = engine.linear(torch.tensor(due, device=ctx0.device))
        taus, gammas = [getattr(runs[k].ctx.hyper, "temperature", 1.0) for k in due], torch.stack([runs[k].ctx.rates.gamma for k in due])
        if runs_ahead:
            metrics = _evaluate_ahead(weight, bias, first, taus, gammas, host)
        else:
            metrics = _evaluate(weight, bias, first, taus, gammas, lambda i, m: recorders[due[i]].reportable(t, m))
        selecting = any(recorders[k].selects(t) for k in due)  # private selection reads the validation logits themselves
        val_logits = linear_logits(weight, bias, first.evals["val"].X) if selecting else None
        for i, k in enumerate(due):
            recorders[k].observe(t, engine.params(k), {name: m[i] for name, m in metrics.items()}, engine.report(k),
                                 val_logits[:, :, i] if val_logits is not None else None)
        eval_time[due] += (time.perf_counter() - t0) / len(due)
        queued.restart()
    engine.settle()
    queued.flush(step_time)
    results = [rec.result(snapshot(engine.params(k)), float(step_time[k]), float(eval_time[k])) for k, rec in enumerate(recorders)]
    engine.close()
    return results


class _Queued:
    """The steps a pack that runs ahead has queued since the device was last waited for: their time is known only
    then, and is shared out as if every queued step took as long (each step's share split among its live
    configurations, as the driver does step by step where it waits for each)."""

    def __init__(self, K: int) -> None:
        self.share, self.steps, self.since = np.zeros(K), 0, time.perf_counter()

    def add(self, live: np.ndarray) -> None:
        self.share[live] += 1.0 / int(live.sum())
        self.steps += 1

    def flush(self, step_time: np.ndarray) -> None:
        """Share out the time since :meth:`restart` (the caller has just waited for the device)."""
        if self.steps:
            step_time += (time.perf_counter() - self.since) / self.steps * self.share
            self.share[:], self.steps = 0.0, 0

    def restart(self) -> None:
        self.since = time.perf_counter()


@dataclass(frozen=True)
class _HostSplits:
    """What a pack that runs ahead computes an evaluation's metrics from on the host: each split's labels and groups,
    and the rate constraints, copied there once."""

    splits: dict
    rates: object

    @staticmethod
    def of(run: Run) -> "_HostSplits":
        return _HostSplits({name: on_host(split) for name, split in run.evals.items()},
                           run.ctx.rates.to("cpu") if run.ctx.rates is not None else None)


def _evaluate_ahead(weight: torch.Tensor, bias: torch.Tensor, run: Run, taus: list[float], gammas: torch.Tensor,
                    host: _HostSplits) -> dict[str, list[dict]]:
    """:func:`_evaluate` for a pack that runs ahead: every split's counts, loss metrics included for every model (on a
    device they cost little), computed on the device and read back in one transfer; the metrics from them on the host.
    A split where a two-class margin was NaN (a diverged model) is evaluated again by the general path."""
    ds, rates = run.ctx.dataset, run.ctx.rates
    n_parts = rates.n_parts if rates is not None else None
    tau = torch.tensor(taus, dtype=weight.dtype, device=weight.device)
    counts = counts_to_host({name: counts_on_device(weight, bias, split, tau, ds.n_groups, ds.n_classes, n_parts)
                             for name, split in run.evals.items()})
    out = {}
    for name, (stats, nan) in counts.items():
        if nan:
            out[name] = evaluate_linear(weight, bias, run.evals[name], taus, ds.n_groups, ds.n_classes, rates, gammas)
        else:
            out[name] = metrics_of_counts(stats, host.splits[name], ds.n_groups, ds.n_classes, host.rates, gammas.cpu())
    return out


def _evaluate(weight: torch.Tensor, bias: torch.Tensor, run: Run, taus: list[float], gammas: torch.Tensor,
              reportable: Callable[[int, dict], bool]) -> dict[str, list[dict]]:
    """The metrics of K models on each of ``run``'s splits. Every model gets the metrics its curves need (counts);
    the models whose entry ``reportable(i, metrics)`` says can be reported get, in a second pass, the loss metrics too
    (:data:`~raco_bench.training.evaluation.LOSS_METRICS`: a softplus and a sigmoid per row and model, most of an
    evaluation's cost otherwise)."""
    ds, rates = run.ctx.dataset, run.ctx.rates
    metrics = {name: evaluate_linear(weight, bias, split, taus, ds.n_groups, ds.n_classes, rates, gammas, losses=False)
               for name, split in run.evals.items()}
    full = [i for i in range(len(taus)) if reportable(i, {name: m[i] for name, m in metrics.items()})]
    if full:
        sub = torch.tensor(full, device=weight.device)
        for name, split in run.evals.items():
            complete = evaluate_linear(weight[sub], bias[sub], split, [taus[i] for i in full], ds.n_groups, ds.n_classes, rates, gammas[sub])
            for i, entry in zip(full, complete):
                metrics[name][i] = entry
    return metrics


def train_runs(runs: list[Run], progress: Callable[[int, dict], None] | None = None, checkpoint: PackCheckpoint | None = None,
               max_pack: int | None = None) -> list[RunResult]:
    """Results of ``runs`` in order: compatible runs of a method with a batched engine trained as packs, every other run alone.
    ``max_pack``: at most this many configurations per pack (consecutive runs; a GPU trial's from its device's free
    memory, docs/packs.md, "The GPU path").

    With ``checkpoint``, the state saved holds every finished result and the state of the pack in training (with its
    members), so a resumed call trains only what was not finished, from where it stopped."""
    saved = checkpoint.restored if checkpoint is not None else None
    results: list[RunResult | None] = [None] * len(runs)
    for i, res in (saved or {}).get("results", {}).items():
        results[i] = res
    last = [time.monotonic()]

    def save(pack: dict | None = None, force: bool = False) -> None:
        if checkpoint is not None and (force or time.monotonic() - last[0] >= checkpoint.every_s):
            checkpoint.save({"results": {i: r for i, r in enumerate(results) if r is not None}, "pack": pack})
            last[0] = time.monotonic()

    groups: list[list[int]] = []
    for i, r in enumerate(runs):
        if pack_blocker(r) is not None:
            if results[i] is None:
                results[i] = execute(r, (lambda entry, i=i: progress(i, entry)) if progress else None)
                save()
            continue
        for g in groups:
            if _compatible(runs[g[0]], r):
                g.append(i)
                break
        else:
            groups.append([i])
    if max_pack is not None:
        groups = [g[i : i + max(1, max_pack)] for g in groups for i in range(0, len(g), max(1, max_pack))]
    for g in groups:
        if all(results[i] is not None for i in g):
            continue
        inner = None
        if checkpoint is not None:
            pack = (saved or {}).get("pack") or {}
            inner = PackCheckpoint(lambda state, g=g: save({"members": g, "state": state}, force=True),
                                   pack.get("state") if pack.get("members") == g else None, checkpoint.every_s)
        sub = train_pack([runs[i] for i in g], (lambda k, entry, g=g: progress(g[k], entry)) if progress else None, checkpoint=inner)
        for i, res in zip(g, sub):
            results[i] = res
    return results  # type: ignore[return-value]
