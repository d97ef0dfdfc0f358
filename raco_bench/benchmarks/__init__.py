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


def private_method_on(method_name: str, dataset: str, spends: str):
    """The private method ``method_name`` and ``dataset``'s published training-split size, for a benchmark that reads no
    data; ValueError naming the problem for an unknown dataset or a non-private method (``spends``: what it would not
    spend, said in the message)."""
    from raco_bench.data import DATASETS
    from raco_bench.data.catalog import public_train_rows
    from raco_bench.methods import get_method

    if dataset not in DATASETS or public_train_rows(dataset) is None:
        raise ValueError(f"unknown dataset {dataset!r}: one of {', '.join(DATASETS)}")
    method = get_method(method_name)
    if not method.private:
        raise ValueError(f"method {method_name!r} is not private: {spends}")
    return method, public_train_rows(dataset)
