"""Benchmarks (run with ``raco-bench bench``); they print measured ratios, never assert timings."""

from __future__ import annotations


def unpackable(method: str) -> str | None:
    """Why ``method`` cannot be measured inside a pack (no such method, or no batched engine), or None."""
    from raco_bench.methods import METHOD_NAMES, method_class

    if method not in METHOD_NAMES:
        return f"no such method; choose among {', '.join(METHOD_NAMES)}"
    if method_class(method).engine is None:
        return "it has no batched engine, so it trains no pack to measure; choose a method that packs"
    return None
