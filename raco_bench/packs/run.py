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

import torch

from raco_bench.packs.allocator import keep_freed_memory
from raco_bench.packs.rows import RowProducts
from raco_bench.training.evaluation import evaluate_linear, linear_logits
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
               checkpoint: PackCheckpoint | None = None) -> list[RunResult]:
    """Train compatible runs in lockstep; ``progress(k, entry)`` sees each configuration's evaluations.
    ``products`` picks how batch rows are multiplied (:mod:`raco_bench.packs.rows`; default: by device).
    ``checkpoint`` saves the pack's state every ``checkpoint.every_s`` seconds and continues from a saved state: every
    draw is a function of (stream, step), so a resumed pack ends exactly as an uninterrupted one (docs/packs.md).

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
    engine = first.method.engine(runs, products)
    K = len(runs)
    recorders = [RunRecorder(r, (lambda entry, k=k: progress(k, entry)) if progress else None) for k, r in enumerate(runs)]
    step_time = torch.zeros(K, dtype=torch.float64)  # each step's time, shared by the configurations it trained
    eval_time = torch.zeros(K, dtype=torch.float64)  # each batched evaluation's time, shared by the configurations it evaluated
    start, last_save, T_max = 1, time.monotonic(), int(engine.steps.max())
    if checkpoint is not None and checkpoint.restored is not None:
        saved = checkpoint.restored
        engine.state, step_time, start = saved["engine"], saved["step_time"], int(saved["step"]) + 1
        eval_time = saved.get("eval_time", eval_time)
        for k, rec in enumerate(recorders):
            rec.restore(saved["recorders"][k])
            for entry in rec.history if progress else ():  # live curves: points already stored are skipped, lost ones sent again
                progress(k, entry)
    for t in range(start, T_max + 1):
        if checkpoint is not None and t > start and time.monotonic() - last_save >= checkpoint.every_s:
            checkpoint.save({"step": t - 1, "engine": engine.state, "step_time": step_time, "eval_time": eval_time,
                             "recorders": [r.snapshot() for r in recorders]})
            last_save = time.monotonic()
        t0 = time.perf_counter()
        engine.step()
        live = (engine.steps >= t).cpu()
        step_time[live] += (time.perf_counter() - t0) / int(live.sum())
        due = [k for k in range(K) if recorders[k].wants(t)]
        if not due:
            continue
        t0 = time.perf_counter()
        weight, bias = engine.linear(torch.tensor(due, device=ctx0.device))
        taus, gammas = [getattr(runs[k].ctx.hyper, "temperature", 1.0) for k in due], torch.stack([runs[k].ctx.rates.gamma for k in due])
        metrics = _evaluate(weight, bias, first, taus, gammas, lambda i, m: recorders[due[i]].reportable(t, m))
        selecting = any(recorders[k].selects(t) for k in due)  # private selection reads the validation logits themselves
        val_logits = linear_logits(weight, bias, first.evals["val"].X) if selecting else None
        for i, k in enumerate(due):
            recorders[k].observe(t, engine.params(k), {name: m[i] for name, m in metrics.items()}, engine.report(k),
                                 val_logits[:, :, i] if val_logits is not None else None)
        eval_time[due] += (time.perf_counter() - t0) / len(due)
    return [rec.result(snapshot(engine.params(k)), float(step_time[k]), float(eval_time[k])) for k, rec in enumerate(recorders)]


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


def train_runs(runs: list[Run], progress: Callable[[int, dict], None] | None = None, checkpoint: PackCheckpoint | None = None) -> list[RunResult]:
    """Results of ``runs`` in order: compatible runs of a method with a batched engine trained as packs, every other run alone.

    With ``checkpoint``, the state saved holds every finished result and the state of the pack in training, so a
    resumed call trains only what was not finished, from where it stopped."""
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
    for n, g in enumerate(groups):
        if all(results[i] is not None for i in g):
            continue
        inner = None
        if checkpoint is not None:
            pack = (saved or {}).get("pack") or {}
            inner = PackCheckpoint(lambda state, n=n: save({"group": n, "state": state}, force=True),
                                   pack.get("state") if pack.get("group") == n else None, checkpoint.every_s)
        sub = train_pack([runs[i] for i in g], (lambda k, entry, g=g: progress(g[k], entry)) if progress else None, checkpoint=inner)
        for i, res in zip(g, sub):
            results[i] = res
    return results  # type: ignore[return-value]
