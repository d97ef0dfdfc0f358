"""`raco-bench bench calibration`: both searches on real calibration problems of a sweep, each value checked against its
budget, the evaluations counted; a method that calibrates nothing is refused before anything is solved."""

from __future__ import annotations

import re

import pytest

from raco_bench.benchmarks import calibration_search


def test_the_benchmark_solves_each_problem_both_ways_and_counts_the_evaluations(capsys):
    assert calibration_search.main(["--configs", "2", "--epsilon", "9"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("q ")]
    assert rows, out
    for row in rows:
        ref, new, n_ref, n_new = re.search(r"(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+) / (\d+)", row).groups()
        assert abs(float(ref) - float(new)) <= 1e-3 * float(ref) + 1e-5  # the same σ to the tolerance (printed to 5 decimals)
        assert int(n_new) < int(n_ref)
    assert re.search(r"in all: \d+ evaluations by bisection, \d+ by the grid search", out)


@pytest.mark.parametrize("method,message", [("sgd", "is not private"), ("raco-dp", "unknown dataset")])
def test_the_benchmark_refuses_what_it_cannot_measure(method, message):
    argv = ["--method", method] + (["--dataset", "nowhere"] if method == "raco-dp" else [])
    with pytest.raises(ValueError, match=message):
        calibration_search.main(argv)
