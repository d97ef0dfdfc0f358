"""The Lagrangian family's audit view: what the white-box audit observes of one step of its batched engine
(:mod:`raco_bench.methods.lagrangian.engine`): the noisy sum of clipped gradients and, for RaCO-DP, the Laplace
histogram (docs/audit.md)."""

from __future__ import annotations

import dataclasses

import torch

from raco_bench.methods.audit_view import AuditView, canary_row, confident, only_row, with_row
from raco_bench.methods.lagrangian import engine as default_engine


def lagrangian_view(run, row: int, module=None, fused: bool | None = None) -> AuditView:
    """The view of ``run`` (one prepared run) with training row ``row`` as the canary; ``module`` replaces the engine
    module (:func:`step_release`, :func:`apply_release`, :class:`PackData`); ``fused`` picks the step's form (default:
    the compiled passes where they apply, as training does; False: the torch form a GPU runs)."""
    module = module or default_engine
    canary = canary_row(run.ctx.plan.data, row)
    engine = default_engine.LagrangianEngine([run])
    s = engine.settings
    data = run.ctx.plan.data
    PackData = module.PackData
    worlds = {"D": PackData.of(data, fused), "D'": PackData.of(with_row(data, *canary), fused), "canary": PackData.of(only_row(data, *canary), fused)}
    rates = engine.rates

    def release(state, world, settings):
        r = module.step_release(state, worlds[world], settings, rates)
        blocks = {"gradient": torch.cat([r.grad_w.flatten(1), r.grad_b], 1)}
        if r.histogram is not None:
            blocks["histogram"] = r.histogram.flatten(1).to(torch.float32)
        return blocks, r

    noise = {"gradient": ("gauss", s.noise_std)}
    bound = {"gradient": float(s.clip_norm[0])}
    if s.private and s.constrained:
        noise["histogram"] = ("laplace", s.laplace_scale)
        bound["histogram"] = 1.0  # a soft prediction's whole unit mass in one cell
    state = dataclasses.replace(engine.state, bias=confident(engine.state.bias, canary[1]))
    return AuditView(release, module.apply_release, noise, bound, state, s, worlds, float(s.expected_batch[0]))
