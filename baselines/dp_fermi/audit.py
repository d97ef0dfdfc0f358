"""DP-FERMI's audit view: what the white-box audit observes of one step of its batched engine
(:mod:`baselines.dp_fermi.engine`): the noisy clipped gradient sums of θ and of W (docs/audit.md). The one release
of the group counts, before training, is covered by the claim but not observed."""

from __future__ import annotations

import dataclasses

import torch

from baselines.dp_fermi import engine as default_engine
from raco_bench.methods.audit_view import AuditView, canary_row, confident, only_row, with_row


def fermi_view(run, row: int, module=None) -> AuditView:
    """The view of ``run`` with training row ``row`` as the canary; ``module`` replaces the engine module
    (:func:`fermi_release`, :func:`apply_fermi_release`)."""
    module = module or default_engine
    engine = default_engine.FermiEngine([run])
    s = engine.settings
    data, ctx_ids, groups = engine.data, engine.ctx_ids, engine.groups
    x, y, table = canary_row(data, row)
    ids = {"D": (ctx_ids, groups), "D'": (torch.cat([ctx_ids, ctx_ids[row : row + 1]]), torch.cat([groups, groups[row : row + 1]])),
           "canary": (ctx_ids[row : row + 1].clone(), groups[row : row + 1].clone())}
    worlds = {"D": data, "D'": with_row(data, x, y, table), "canary": only_row(data, x, y, table)}

    def release(state, world, settings):
        r = module.fermi_release(state, worlds[world], *ids[world], settings)
        return {"gradient": torch.cat([r.grad_w.flatten(1), r.grad_b], 1), "W": r.grad_W.flatten(1)}, r

    noise = {"gradient": ("gauss", s.noise_theta), "W": ("gauss", s.noise_w)}
    bound = {"gradient": float(s.clip_theta[0]), "W": float(s.clip_w[0])}
    state = dataclasses.replace(engine.state, bias=confident(engine.state.bias, y))
    return AuditView(release, module.apply_fermi_release, noise, bound, state, s, worlds, float(s.batch[0]),
                     unobserved="the group-count release")
