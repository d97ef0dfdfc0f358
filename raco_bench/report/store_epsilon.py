"""The line a report states about the store as a whole: the composition of every run its sweep holds, runs that drew the
same batches composed as one release, beside the per-run ε (docs/privacy.md, "The store's ε")."""

from __future__ import annotations

from raco_bench.records.results import read_results
from raco_bench.report.load import experiment_id
from raco_bench.sweeps.store_privacy import store_text, sweep_store_epsilon


def store_line(uri: str, experiment: str, sweep_id: str) -> str:
    """Every trained run of the sweep, phases and candidates included (the report's figures show fewer)."""
    figures = sweep_store_epsilon(read_results(uri, experiment_id(uri, experiment), sweep_id))
    return (store_text(figures) + " Each run's own epsilon holds for a reader of that run; the store's for a reader of all of them "
            "(docs/privacy.md, \"The store's epsilon\").") if figures else ""
