"""DP post-processing's audit view (record-level mode): what the white-box audit observes of a run (docs/audit.md).

The run makes T DP-SGD steps of its base model, then one release of the confusion histogram n[y, a, ŷ] of the
training rows under the last base model, each cell + Laplace(s) (:func:`baselines.dp_postprocess.plugin.release_confusion`).
The view observes both: each step's noisy clipped gradient sum, through the Lagrangian family's batched engine
run with the base model's own step settings (DP-SGD: no constraints), and, after the last step, the histogram,
computed for K runs at once from the same stream draws as the plugin (tests/test_whitebox_audit.py checks the
two agree). Every row is in the histogram: that release is not subsampled. The private checkpoint selection is
covered by the claim but not observed.
"""

from __future__ import annotations

import dataclasses

import torch

from raco_bench.methods.audit_view import AuditView, WorstCase, canary_row, confident, only_row, with_row
from raco_bench.methods.lagrangian import engine as lagrangian
from raco_bench.packs.engine import vector
from raco_bench.privacy import counter_rng as rng


def confusion_release(weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int,
                      laplace_scale: torch.Tensor | None, seeds: torch.Tensor, step: int, source) -> torch.Tensor:
    """For K logistic models (K × c × d, K × c): the confusion counts n[y, a, ŷ] of rows (X, y, group), flattened
    (K × 4G, the plugin's cell order), + Laplace(``laplace_scale``) from each run's stream at ``step`` (None: exact)."""
    pred = torch.einsum("nd,kcd->kn", X, weight[:, 1:2] - weight[:, :1]).add_(bias[:, 1:2] - bias[:, :1]) > 0  # argmax of 2 classes
    cell = (y * n_groups + group)[None] * 2 + pred.long()
    K = weight.shape[0]
    counts = torch.zeros(K, 4 * n_groups, dtype=torch.float64, device=X.device).scatter_add_(1, cell, torch.ones_like(cell, dtype=torch.float64))
    if laplace_scale is None:
        return counts
    noise = rng.laplace(rng.stream_keys(seeds, step, rng.LAPLACE, source), 4 * n_groups).to(torch.float64)
    return counts + laplace_scale.double()[:, None] * noise


def postprocess_view(run, row: int, module=None) -> AuditView:
    """The view of ``run`` (record-level mode) with training row ``row`` as the canary; ``module`` replaces the Lagrangian
    engine module the base steps run through."""
    module = module or lagrangian
    ctx, plan = run.ctx, run.ctx.plan
    settings = dataclasses.replace(module.lagrangian_settings([run], constrained=False, private=True))
    scale = vector([run], [plan.laplace_scale], torch.float64)
    data = plan.data
    x, y, table = canary_row(data, row)
    group = plan.group
    G = ctx.dataset.n_groups
    worlds = {"D": module.PackData.of(data), "D'": module.PackData.of(with_row(data, x, y, table)), "canary": module.PackData.of(only_row(data, x, y, table))}
    labels = {"D": (data.y, group), "D'": (torch.cat([data.y, y[None]]), torch.cat([group, group[row : row + 1]])),
              "canary": (y[None].clone(), group[row : row + 1].clone())}
    T = int(ctx.steps)
    init = run.method.init_state(ctx, ctx.stream()).base
    state = module.PackState(init.params["weight"][None], confident(init.params["bias"][None], y), *(torch.zeros(1, 0, device=ctx.device),) * 3, 0)

    def release(state, world, s):
        if state.step < T:  # a base step: the noisy clipped gradient sum
            r = module.step_release(state, worlds[world], s, None)
            return {"gradient": torch.cat([r.grad_w.flatten(1), r.grad_b], 1)}, r
        X = worlds[world].X
        hist = confusion_release(state.weight, state.bias, X, *labels[world], G, scale.expand(len(s.seeds)) if s.private else None,
                                 s.seeds, T, s.source)
        return {"histogram": hist}, None

    def apply(state, s, raw):
        return module.apply_release(state, s, raw) if raw is not None else dataclasses.replace(state, step=state.step + 1)

    def worst(steps: int) -> list[WorstCase]:
        return [WorstCase(1.0 / float(settings.noise_std[0] / settings.clip_norm[0]), None)] * steps + [WorstCase(None, plan.laplace_scale, sampled=False)]

    return AuditView(release, apply, {"gradient": ("gauss", settings.noise_std), "histogram": ("laplace", scale)},
                     {"gradient": float(settings.clip_norm[0]), "histogram": 1.0}, state, settings, worlds, float(settings.expected_batch[0]),
                     unobserved="the private checkpoint selection" if ctx.config.selection is not None else "",
                     phases=lambda steps: steps + 1, sampled=lambda state: state.step < T, worst=worst)
