"""Train a pack: K prepared runs (``raco_bench.training.loop.prepare_run``) in lockstep, each ending with
the same :class:`~raco_bench.training.loop.RunResult` it would get alone.

Each configuration keeps its own evaluation steps (step 1, every ``eval_every``, its own T, its
private-selection checkpoints), its checkpoint rule and its result; the recorder that does this is
the same one a single run uses (:class:`~raco_bench.training.loop.RunRecorder`). Evaluations due
at the same step are one batched pass of those models over each split
(:func:`~raco_bench.training.evaluation.evaluate_logits`).

Which runs can share a pack: runs of one method with a batched engine (the Lagrangian family with
the shared histogram batch, :mod:`raco_bench.packs.lagrangian`; DP-FERMI in one privacy mode,
:mod:`raco_bench.packs.fermi`), with logistic regression, on the same training tensors, constraint
structure and device. Any other run (the MLP, an independent histogram batch, a method without an
engine) trains alone through ``execute``, inside the same call, so a caller never needs to know which
is which (:func:`train_runs`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from baselines.dp_fermi import DPFermi
from raco_bench.methods.raco_dp import LagrangianSGDA, lagrangian_report
from raco_bench.packs.fermi import FermiPackSettings, FermiPackState, fermi_pack_step
from raco_bench.packs.lagrangian import PackData, PackSettings, PackState, pack_step
from raco_bench.packs.rows import RowProducts, rows_for
from raco_bench.training.evaluation import evaluate_logits, linear_logits
from raco_bench.training.loop import Run, RunRecorder, RunResult, execute, snapshot

INF = float("inf")  # "no clipping" / "no box" as a per-configuration number


@dataclass
class PackCheckpoint:
    """Where a pack keeps its state while it trains: ``save(state)`` stores a state, ``restored`` is the state an
    earlier attempt saved (None: start at step 1), ``every_s`` the seconds between saves. The state holds the
    engine's tensors, the step, the step times and every configuration's recorder (docs/packs.md, "Checkpoints")."""

    save: Callable[[dict], None]
    restored: dict | None = None
    every_s: float = 60.0


def _vector(runs: list[Run], values, dtype=torch.float32) -> torch.Tensor:
    """One value per configuration, on the pack's device."""
    return torch.tensor(values, dtype=dtype, device=runs[0].ctx.device)


def lagrangian_settings(runs: list[Run]) -> PackSettings:
    """The per-configuration numbers of ``runs`` (all members of one Lagrangian method)."""
    dev = runs[0].ctx.device
    vec = lambda values, dtype=torch.float32: _vector(runs, values, dtype)  # noqa: E731
    st = [r.ctx.plan.settings for r in runs]
    method = runs[0].method
    return PackSettings(
        seeds=vec([r.ctx.stream_id for r in runs], torch.int64),
        steps=vec([r.ctx.steps for r in runs], torch.int64),
        sampling_rate=vec([s.sampling_rate for s in st], torch.float64),
        expected_batch=vec([s.expected_batch for s in st]),
        clip_norm=vec([s.clip_norm if s.clip_norm is not None else INF for s in st]),
        noise_std=vec([s.noise_std for s in st]),
        laplace_scale=vec([s.laplace_scale or 0.0 for s in st]),
        temperature=vec([s.temperature for s in st]),
        lr=vec([s.lr for s in st]),
        dual_lr=vec([s.dual_lr for s in st]),
        hard=vec([s.dual_update == "hard" for s in st], torch.bool),
        lambda_max=vec([s.lambda_max if s.lambda_max is not None else INF for s in st]),
        dual_momentum=vec([s.dual_momentum for s in st]),
        clip_constraint_value=vec([s.clip_constraint_value for s in st], torch.bool),
        gamma=torch.stack([r.ctx.rates.gamma for r in runs]) if method.constrained else torch.zeros(len(runs), 0, device=dev),
        private=method.private,
        constrained=method.constrained,
        source=runs[0].ctx.source,
    )


class _LinearEngine:
    """What :func:`train_pack` asks of an engine, for methods whose model is logistic regression
    (``state.weight`` K × c × d and ``state.bias`` K × c); each engine adds ``step`` and ``report``."""

    state: PackState | FermiPackState
    steps: torch.Tensor

    def linear(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.state.weight[index], self.state.bias[index]

    def params(self, k: int) -> dict:
        return self.state.params(k)


class LagrangianEngine(_LinearEngine):
    """The Lagrangian family (RaCO-DP, SGDA, DP-SGD, SGD) as a pack."""

    def __init__(self, runs: list[Run], products: RowProducts | None = None) -> None:
        first = runs[0]
        self.settings = lagrangian_settings(runs)
        self.steps = self.settings.steps
        init = [first.method.init_state(r.ctx, r.ctx.stream()) for r in runs]
        K, J, dev = len(runs), init[0].lam.shape[0], first.ctx.device
        self.state = PackState(torch.stack([i.params["weight"] for i in init]), torch.stack([i.params["bias"] for i in init]),
                               torch.zeros(K, J, device=dev), torch.zeros(K, J, device=dev), torch.zeros(K, J, device=dev), 0)
        self.method, self.data = first.method, PackData.of(first.ctx.plan.data)
        self.rates = first.ctx.rates if first.method.constrained else None
        self.products = products or rows_for(dev)

    def step(self) -> None:
        self.state = pack_step(self.state, self.data, self.settings, self.rates, self.products)

    def report(self, k: int) -> dict:
        return lagrangian_report(self.method, self.state.lam[k], self.state.estimates[k])


class FermiEngine(_LinearEngine):
    """DP-FERMI as a pack."""

    def __init__(self, runs: list[Run], products: RowProducts | None = None) -> None:
        first = runs[0]
        init = [first.method.init_state(r.ctx, r.ctx.stream()) for r in runs]
        h = [r.ctx.hyper for r in runs]
        self.products = products or rows_for(first.ctx.device)
        private = h[0].privacy != "none"
        vec = lambda values, dtype=torch.float32: _vector(runs, values, dtype)  # noqa: E731

        self.settings = FermiPackSettings(
            seeds=vec([r.ctx.stream_id for r in runs], torch.int64), steps=vec([r.ctx.steps for r in runs], torch.int64),
            sampling_rate=vec([r.ctx.plan.q for r in runs], torch.float64), batch=vec([float(x.batch_size) for x in h]),
            lr=vec([x.lr for x in h]), lr_w=vec([x.lr_w for x in h]), fairness=vec([x.fairness for x in h]),
            clip_theta=vec([x.clip_theta if private else INF for x in h]), clip_w=vec([x.clip_w if private else INF for x in h]),
            noise_theta=vec([r.ctx.plan.sigma * x.clip_theta if private else 0.0 for r, x in zip(runs, h)]),
            noise_w=vec([r.ctx.plan.sigma * x.clip_w if private else 0.0 for r, x in zip(runs, h)]),
            radius=vec([x.w_radius for x in h]), private=private, source=first.ctx.source)
        self.steps = self.settings.steps
        self.state = FermiPackState(torch.stack([i.params["weight"] for i in init]), torch.stack([i.params["bias"] for i in init]),
                                    torch.stack([i.W for i in init]), torch.stack([i.inv_sqrt_p for i in init]), 0)
        plan = first.ctx.plan
        self.data, self.ctx_ids, self.groups = plan.data, plan.ctx_ids, plan.s

    def step(self) -> None:
        self.state = fermi_pack_step(self.state, self.data, self.ctx_ids, self.groups, self.settings, self.products)

    def report(self, k: int) -> dict:
        return {"w_norm": float(self.state.W[k].norm())}


def _engine(run: Run):
    if isinstance(run.method, LagrangianSGDA):
        return LagrangianEngine
    if isinstance(run.method, DPFermi):
        return FermiEngine
    return None


def pack_blocker(run: Run) -> str | None:
    """None if ``run`` can join a pack, else why not."""
    h = run.ctx.hyper
    if _engine(run) is None:
        return f"method {run.method.name} has no batched engine yet"
    if h.model != "logistic":
        return "the MLP has no batched engine yet"
    if isinstance(run.method, LagrangianSGDA) and run.method.constrained and h.histogram_batch != "shared":
        return "histogram_batch=independent has no batched engine yet"
    return None


def _compatible(a: Run, b: Run) -> bool:
    pa, pb = a.ctx.plan, b.ctx.plan
    same_rates = (a.ctx.rates is None) == (b.ctx.rates is None) and (
        a.ctx.rates is None or (torch.equal(a.ctx.rates.membership, b.ctx.rates.membership) and torch.equal(a.ctx.rates.weights, b.ctx.rates.weights)))
    same_mode = getattr(a.ctx.hyper, "privacy", None) == getattr(b.ctx.hyper, "privacy", None)  # DP-FERMI: one privacy mode per pack
    return (type(a.method) is type(b.method) and a.ctx.dataset is b.ctx.dataset and pa.data.table.shape == pb.data.table.shape
            and a.ctx.device == b.ctx.device and a.ctx.source is b.ctx.source and same_rates and same_mode and set(a.evals) == set(b.evals))


def train_pack(runs: list[Run], progress: Callable[[int, dict], None] | None = None, products: RowProducts | None = None,
               checkpoint: PackCheckpoint | None = None) -> list[RunResult]:
    """Train compatible runs in lockstep; ``progress(k, entry)`` sees each configuration's evaluations.
    ``products`` picks how batch rows are multiplied (:mod:`raco_bench.packs.rows`; default: by device).
    ``checkpoint`` saves the pack's state every ``checkpoint.every_s`` seconds and continues from a saved state: every
    draw is a function of (stream, step), so a resumed pack ends exactly as an uninterrupted one (docs/packs.md)."""
    for r in runs:
        why = pack_blocker(r)
        if why is not None:
            raise ValueError(f"run {r.ctx.run.method} seed {r.ctx.run.seed} cannot join a pack: {why}")
        if not _compatible(runs[0], r):
            raise ValueError("a pack holds runs of one method (and one privacy mode) on the same training data, constraints, device and word source "
                             "(prepare its runs with one Keystream: prepare_run(..., source=...))")
    first = runs[0]
    ctx0 = first.ctx
    engine = _engine(first)(runs, products)
    K = len(runs)
    recorders = [RunRecorder(r, (lambda entry, k=k: progress(k, entry)) if progress else None) for k, r in enumerate(runs)]
    step_time = torch.zeros(K, dtype=torch.float64)  # each step's time, shared by the configurations it trained
    start, last_save, T_max = 1, time.monotonic(), int(engine.steps.max())
    if checkpoint is not None and checkpoint.restored is not None:
        saved = checkpoint.restored
        engine.state, step_time, start = saved["engine"], saved["step_time"], int(saved["step"]) + 1
        for k, rec in enumerate(recorders):
            rec.restore(saved["recorders"][k])
            for entry in rec.history if progress else ():  # live curves: points already stored are skipped, lost ones sent again
                progress(k, entry)
    for t in range(start, T_max + 1):
        if checkpoint is not None and t > start and time.monotonic() - last_save >= checkpoint.every_s:
            checkpoint.save({"step": t - 1, "engine": engine.state, "step_time": step_time, "recorders": [r.snapshot() for r in recorders]})
            last_save = time.monotonic()
        t0 = time.perf_counter()
        engine.step()
        live = (engine.steps >= t).cpu()
        step_time[live] += (time.perf_counter() - t0) / int(live.sum())
        due = [k for k in range(K) if recorders[k].wants(t)]
        if not due:
            continue
        weight, bias = engine.linear(torch.tensor(due, device=ctx0.device))
        metrics, val_logits = {}, None
        for name, split in first.evals.items():
            logits = linear_logits(weight, bias, split.X)
            if name == "val":
                val_logits = logits
            metrics[name] = evaluate_logits(logits, split, [getattr(runs[k].ctx.hyper, "temperature", 1.0) for k in due], ctx0.dataset.n_groups,
                                            ctx0.dataset.n_classes, ctx0.rates, torch.stack([runs[k].ctx.rates.gamma for k in due]))
        for i, k in enumerate(due):
            recorders[k].observe(t, engine.params(k), {name: m[i] for name, m in metrics.items()}, engine.report(k),
                                 val_logits[:, :, i] if val_logits is not None else None)
    return [rec.result(snapshot(engine.params(k)), float(step_time[k])) for k, rec in enumerate(recorders)]


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
