"""Audits in MLflow: one run per audit in the experiment ``raco-bench-audit`` (its own, so that audits of any
configuration sit side by side), and the table the report draws from them (docs/audit.md)."""

from __future__ import annotations

import pandas as pd

from raco_bench import tracking

AUDIT_EXPERIMENT = "raco-bench-audit"
AUDIT_KIND = "audit"
COLUMNS = ["audit", "variant", "method", "dataset", "epsilon_claimed", "epsilon_audited", "epsilon_audited_point", "epsilon_audited_upper",
           "epsilon_ideal_at_runs",
           "confidence", "runs_per_world", "steps", "sampling_rate", "note"]


def log_audit(uri: str, kind: str, params: dict, metrics: dict[str, float], note: str, experiment: str = AUDIT_EXPERIMENT) -> str:
    """One finished run holding an audit: ``kind`` (whitebox, one-run, preprocessing), its settings as params,
    the claimed and audited ε as metrics, and ``note`` (what it observed and what it claims) as a tag."""
    name = f"audit {kind} {params.get('method', '')} eps={params.get('epsilon', '')}".strip()
    values = {k: float(v) for k, v in metrics.items() if v is not None}
    tags = {tracking.KIND: AUDIT_KIND, "audit.kind": kind, "audit.note": note[:4900]}
    return tracking.log_records(uri, experiment, tracking.RunRecord(name, tags, params, values))


def load_audits(uri: str, experiment: str = AUDIT_EXPERIMENT) -> pd.DataFrame | None:
    """The latest audit of each (kind, variant, method, dataset, claimed ε, steps, q) as a table, or None when none was logged."""
    exp = tracking.experiment_id(uri, experiment)
    if exp is None:
        return None
    runs = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = '{AUDIT_KIND}'", order_by=["attributes.start_time DESC"])
    rows = []
    for r in runs:
        p, m = r.data.params, r.data.metrics
        rows.append({"audit": r.data.tags.get("audit.kind", ""), "variant": p.get("variant", ""), "method": p.get("method", ""),
                     "dataset": p.get("dataset", ""),
                     "epsilon_claimed": m.get("epsilon_claimed"), "epsilon_audited": m.get("epsilon_audited"),
                     "epsilon_audited_point": m.get("epsilon_audited_point"), "epsilon_audited_upper": m.get("epsilon_audited_upper"),
                     "epsilon_ideal_at_runs": m.get("epsilon_ideal_at_runs"),
                     "confidence": float(p.get("confidence", "nan")), "runs_per_world": int(float(p.get("runs", "0"))),
                     "steps": p.get("steps", ""), "sampling_rate": p.get("sampling_rate", ""), "note": r.data.tags.get("audit.note", ""),
                     "start": r.info.start_time})
    if not rows:
        return None
    df = pd.DataFrame(rows)
    df["claimed_rounded"] = df["epsilon_claimed"].round(3)
    df = df.sort_values("start", ascending=False).drop_duplicates(["audit", "variant", "method", "dataset", "claimed_rounded", "steps", "sampling_rate"])
    return df[COLUMNS].sort_values(["audit", "method", "variant"]).reset_index(drop=True)
