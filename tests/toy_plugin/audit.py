"""The toy's audit view: each step's noisy clipped gradient sum."""

from __future__ import annotations

import torch

from raco_bench.methods.audit_view import CANARY_SCALE, AuditView, confident
from toy_plugin import engine


def toy_view(run, row: int, module=None) -> AuditView:
    module = module or engine
    plan = run.ctx.plan
    x, y = plan.X[row] * CANARY_SCALE, (plan.y[row] + 1) % 2
    worlds = {"D": (plan.X, plan.y), "D'": (torch.cat([plan.X, x[None]]), torch.cat([plan.y, y[None]])), "canary": (x[None], y[None])}
    s = module.settings_of([run])
    eng = module.ToyEngine([run])
    state = module.ToyState(eng.state.weight, confident(eng.state.bias, y), 0)

    def release(state, world, settings):
        r = module.release(state, *worlds[world], settings)
        return {"gradient": torch.cat([r.grad_w.flatten(1), r.grad_b], 1)}, r

    class Rows:  # what the audit reads of a world: its rows
        def __init__(self, X):
            self.X = X

    return AuditView(release, module.apply, {"gradient": ("gauss", s.noise_std)}, {"gradient": float(s.clip[0])}, state, s,
                     {k: Rows(v[0]) for k, v in worlds.items()}, float(s.expected_batch[0]))
