"""Train a pack: K prepared runs (``raco_bench.training.loop.prepare_run``) in lockstep, each ending with
the same :class:`~raco_bench.training.loop.RunResult` it would get alone.

Each configuration keeps its own evaluation steps (step 1, every ``eval_every``, its own T, its
private-selection checkpoints), its checkpoint rule and its result; the recorder that does this is
the same one a single run uses (:class:`~raco_bench.training.loop.RunRecorder`). Evaluations due
at the same step are one batched pass of those models over each split
(:func:`~raco_bench.training.evaluation.evaluate_logits`).

Which runs can share a pack: members of the Lagrangian family with logistic regression and the
shared histogram batch, on the same training tensors, constraint structure and device. Any other run
(DP-FERMI, the MLP, an independent histogram batch) trains alone through ``execute``, inside the same
call, so a caller never needs to know which is which (:func:`train_runs`).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from raco_bench.methods.raco_dp import LagrangianSGDA, lagrangian_report
from raco_bench.packs.lagrangian import PackSettings, PackState, chunk_size, pack_step
from raco_bench.privacy.counter_rng import Stream
from raco_bench.training.evaluation import evaluate_logits, linear_logits
from raco_bench.training.loop import Run, RunRecorder, RunResult, execute, snapshot


def pack_blocker(run: Run) -> str | None:
    """None if ``run`` can join a Lagrangian pack, else why not."""
    h = run.ctx.hyper
    if not isinstance(run.method, LagrangianSGDA):
        return f"method {run.method.name} has no batched engine yet"
    if h.model != "logistic":
        return "the MLP has no batched engine yet"
    if run.method.constrained and h.histogram_batch != "shared":
        return "histogram_batch=independent has no batched engine yet"
    return None


def _compatible(a: Run, b: Run) -> bool:
    pa, pb = a.ctx.plan, b.ctx.plan
    same_rates = (a.ctx.rates is None) == (b.ctx.rates is None) and (
        a.ctx.rates is None or (torch.equal(a.ctx.rates.membership, b.ctx.rates.membership) and torch.equal(a.ctx.rates.weights, b.ctx.rates.weights)))
    return (type(a.method) is type(b.method) and a.ctx.dataset is b.ctx.dataset and pa.data.table.shape == pb.data.table.shape
            and a.ctx.device == b.ctx.device and same_rates and set(a.evals) == set(b.evals))


def settings(runs: list[Run]) -> PackSettings:
    """The per-configuration numbers of ``runs`` (all members of one Lagrangian method)."""
    dev = runs[0].ctx.device
    inf = float("inf")

    def vec(values, dtype=torch.float32) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=dev)

    st = [r.ctx.plan.settings for r in runs]
    method = runs[0].method
    return PackSettings(
        seeds=vec([r.ctx.run.seed for r in runs], torch.int64),
        steps=vec([r.ctx.steps for r in runs], torch.int64),
        sampling_rate=vec([s.sampling_rate for s in st], torch.float64),
        expected_batch=vec([s.expected_batch for s in st]),
        clip_norm=vec([s.clip_norm if s.clip_norm is not None else inf for s in st]),
        noise_std=vec([s.noise_std for s in st]),
        laplace_scale=vec([s.laplace_scale or 0.0 for s in st]),
        temperature=vec([s.temperature for s in st]),
        lr=vec([s.lr for s in st]),
        dual_lr=vec([s.dual_lr for s in st]),
        hard=vec([s.dual_update == "hard" for s in st], torch.bool),
        lambda_max=vec([s.lambda_max if s.lambda_max is not None else inf for s in st]),
        dual_momentum=vec([s.dual_momentum for s in st]),
        clip_constraint_value=vec([s.clip_constraint_value for s in st], torch.bool),
        gamma=torch.stack([r.ctx.rates.gamma for r in runs]) if method.constrained else torch.zeros(len(runs), 0, device=dev),
        private=method.private,
        constrained=method.constrained,
    )


def train_pack(runs: list[Run], progress: Callable[[int, dict], None] | None = None) -> list[RunResult]:
    """Train compatible Lagrangian runs in lockstep; ``progress(k, entry)`` sees each configuration's evaluations."""
    for r in runs:
        why = pack_blocker(r)
        if why is not None:
            raise ValueError(f"run {r.ctx.run.method} seed {r.ctx.run.seed} cannot join a pack: {why}")
        if not _compatible(runs[0], r):
            raise ValueError("a pack holds runs of one method on the same training data, constraints and device")
    first = runs[0]
    method, ctx0 = first.method, first.ctx
    s = settings(runs)
    K = len(runs)
    recorders = [RunRecorder(r, (lambda entry, k=k: progress(k, entry)) if progress else None) for k, r in enumerate(runs)]
    init = [method.init_state(r.ctx, Stream(r.ctx.run.seed, r.ctx.device)) for r in runs]
    J = init[0].lam.shape[0]
    state = PackState(torch.stack([i.params["weight"] for i in init]), torch.stack([i.params["bias"] for i in init]),
                      torch.zeros(K, J, device=ctx0.device), torch.zeros(K, J, device=ctx0.device), 0)
    data, rates = ctx0.plan.data, ctx0.rates if method.constrained else None
    chunk = chunk_size(s, data, ctx0.device)
    step_time = torch.zeros(K, dtype=torch.float64)  # each step's time, shared by the configurations it trained
    for t in range(1, int(s.steps.max()) + 1):
        t0 = time.perf_counter()
        state = pack_step(state, data, s, rates, chunk)
        live = (s.steps >= t).cpu()
        step_time[live] += (time.perf_counter() - t0) / int(live.sum())
        due = [k for k in range(K) if recorders[k].wants(t)]
        if not due:
            continue
        index = torch.tensor(due, device=ctx0.device)
        weight, bias = state.weight[index], state.bias[index]
        metrics, val_logits = {}, None
        for name, split in first.evals.items():
            logits = linear_logits(weight, bias, split.X)
            if name == "val":
                val_logits = logits
            metrics[name] = evaluate_logits(logits, split, [runs[k].ctx.hyper.temperature for k in due], ctx0.dataset.n_groups,
                                            ctx0.dataset.n_classes, ctx0.rates, torch.stack([runs[k].ctx.rates.gamma for k in due]))
        for i, k in enumerate(due):
            report = lagrangian_report(method, state.lam[k], state.estimates[k] if state.estimates is not None else None)
            recorders[k].observe(t, state.params(k), {name: m[i] for name, m in metrics.items()}, report,
                                 val_logits[i] if val_logits is not None else None)
    return [rec.result(snapshot(state.params(k)), float(step_time[k])) for k, rec in enumerate(recorders)]


def train_runs(runs: list[Run], progress: Callable[[int, dict], None] | None = None) -> list[RunResult]:
    """Results of ``runs`` in order: compatible Lagrangian runs trained as packs, every other run alone."""
    results: list[RunResult | None] = [None] * len(runs)
    groups: list[list[int]] = []
    for i, r in enumerate(runs):
        if pack_blocker(r) is not None:
            results[i] = execute(r, (lambda entry, i=i: progress(i, entry)) if progress else None)
            continue
        for g in groups:
            if _compatible(runs[g[0]], r):
                g.append(i)
                break
        else:
            groups.append([i])
    for g in groups:
        sub = train_pack([runs[i] for i in g], (lambda k, entry, g=g: progress(g[k], entry)) if progress else None)
        for i, res in zip(g, sub):
            results[i] = res
    return results  # type: ignore[return-value]
