"""The throughput benchmark's records (``raco-bench bench throughput``): the experiment its rows are logged to, and their
reader, which the report's wall-time tables use (:mod:`raco_bench.report.build`)."""

from __future__ import annotations

from raco_bench import tracking

THROUGHPUT_EXPERIMENT = "raco-bench-throughput"


def read_throughput(uri: str):
    """The latest throughput benchmark's rows (pandas), or None."""
    import pandas as pd

    rows = tracking.latest_rows(uri, THROUGHPUT_EXPERIMENT, "throughput")
    return pd.DataFrame(rows).assign(pack_size=lambda d: d["pack_size"].astype(int)).sort_values("pack_size").reset_index(drop=True) if rows else None
