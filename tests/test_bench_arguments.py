"""`raco-bench bench throughput --also` and `bench memory --method`: a method that cannot be measured inside a pack is refused before
anything runs."""

from __future__ import annotations

import pytest

from raco_bench.benchmarks import throughput


@pytest.mark.parametrize("method,message", [("no-such-method", "no such method; choose among"), ("pf-ld", "has no batched engine")])
def test_also_refuses_a_method_it_cannot_measure_in_a_pack(method, message, capsys, monkeypatch):
    monkeypatch.setattr(throughput, "measure", lambda *a, **k: pytest.fail("measured despite a bad --also"))
    with pytest.raises(SystemExit) as exit_info:
        throughput.main(["--also", method, "--no-mlflow"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--also {method}" in err and message in err


def test_also_measures_each_other_method_once_and_not_the_default_ones_again(monkeypatch, capsys):
    seen = {}

    def fake_measure(sizes, device, eval_every, singles, also=(), *more):
        seen["also"] = also
        raise SystemExit(0)  # stop before measuring: only the arguments are checked here

    monkeypatch.setattr(throughput, "measure", fake_measure)
    with pytest.raises(SystemExit):
        throughput.main(["--also", "dp-fermi", "raco-dp", "dp-fermi", "--no-mlflow"])
    assert seen["also"] == ("dp-fermi",)


@pytest.mark.parametrize("method,message", [("no-such-method", "no such method; choose among"), ("pf-ld", "has no batched engine")])
def test_bench_memory_refuses_a_method_that_trains_no_pack(method, message, capsys, monkeypatch):
    from raco_bench.benchmarks import pack_memory

    monkeypatch.setattr(pack_memory, "measure", lambda *a, **k: pytest.fail("measured despite a bad --method"))
    with pytest.raises(SystemExit) as exit_info:
        pack_memory.main(["--method", method])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--method {method}" in err and message in err
