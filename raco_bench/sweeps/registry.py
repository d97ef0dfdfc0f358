"""The selected models in MLflow's Model Registry (docs/sweeps.md, "MLflow").

For each (method, ε, γ) that phase 1 selected a configuration for, one registered model named
``<method>.eps=<ε>.gamma=<γ>.<experiment>`` (what tells models apart first: the registry's list cuts long names);
each of its versions is the reported model of one phase-2 seed
(they are draws of the same selected configuration; none is picked on test data). Versions carry the
run's method, ε, γ, configuration, seed, privacy notion, what it read outside the budget and its sweep id
(two sweeps of one experiment, say 8 then 200 configurations, register under the same names: the
``raco_bench.sweep_id`` tag of a version tells them apart).
"""

from __future__ import annotations

from raco_bench import tracking
from raco_bench.sweeps.plan import Selection
from raco_bench.sweeps.spec import SweepSpec


def registered_name(experiment: str, method: str, epsilon, gamma) -> str:
    return f"{method}.{tracking.eps_text(epsilon)}.gamma={tracking.gamma_text(gamma)}.{experiment}"


def register_selected(uri: str, experiment_id: str, spec: SweepSpec, selections: list[Selection]) -> int:
    """Register every phase-2 model of every selection (idempotent: a resumed sweep adds only what is missing); the
    number of versions the registry holds for them."""
    count = 0
    for sel in selections:
        if sel.config_id is None:
            continue
        query = (f"tags.`{tracking.KIND}` = 'trial' and tags.`{tracking.SWEEP_ID}` = '{spec.sweep_id}' and tags.`{tracking.PHASE}` = '2' "
                 f"and tags.method = '{sel.method}' and tags.epsilon = '{sel.epsilon}' and tags.gamma = '{tracking.gamma_text(sel.gamma)}' "
                 f"and tags.config_id = '{sel.config_id}'")
        name = registered_name(spec.experiment, sel.method, sel.epsilon, sel.gamma)
        for run in sorted(tracking.search_all(uri, [experiment_id], query), key=lambda r: int(r.data.tags.get("seed", 0))):
            t = run.data.tags
            tags = {k: t.get(k, "") for k in ("method", "dataset", "constraint", "epsilon", "gamma", "config_id", "seed", "privacy_notion",
                                             "outside_budget", "checkpoint", "randomness", tracking.SWEEP_ID)}
            acc = run.data.metrics.get("test_accuracy")
            description = (f"Sweep {spec.sweep_id}: {sel.method} at {tracking.eps_text(sel.epsilon)}, "
                           f"selected on validation for gamma={tracking.gamma_text(sel.gamma)} "
                           f"(configuration {sel.config_id}); phase-2 seed {t.get('seed')}"
                           + (f", test accuracy {acc:.4f}" if acc is not None else "") + f". Privacy: {t.get('privacy_notion', '')}; "
                           f"outside the budget: {t.get('outside_budget', 'none')}.")
            model_tags = {"method": sel.method, "epsilon": str(sel.epsilon), "gamma": tracking.gamma_text(sel.gamma),
                          "config_id": str(sel.config_id), "experiment": spec.experiment, tracking.SWEEP_ID: spec.sweep_id}
            model_description = (f"The configuration phase 1 selected for {sel.method} at {tracking.eps_text(sel.epsilon)}, "
                                 f"gamma={tracking.gamma_text(sel.gamma)} in {spec.experiment}; a version per phase-2 seed.")
            if tracking.register_model(uri, name, run.info.run_id, tags, description, model_tags, model_description) is not None:
                count += 1
    return count
