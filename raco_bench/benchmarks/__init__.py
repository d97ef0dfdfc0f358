"""Benchmarks (run with ``raco-bench bench``); they print measured ratios, never assert timings."""
