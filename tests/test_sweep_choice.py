"""Which sweep `raco-bench report` reads by default (raco_bench/records/results.py, sweep_latest): the one that trained
last. A sweep resumed after others ran (the study's Credit repeat 0, cut at a session's end and resumed after repeats
1-4) is reported, not the sweep that merely started last."""

from __future__ import annotations

from types import SimpleNamespace

from raco_bench import tracking
from raco_bench.records.results import sweep_latest


def _pack(sweep: str, start_ms: int):
    """A complete pack run as the store returns it: its tags and its start time (the two things read)."""
    return SimpleNamespace(data=SimpleNamespace(tags={tracking.SWEEP_ID: sweep}), info=SimpleNamespace(start_time=start_ms))


def test_a_resumed_sweep_is_the_one_that_trained_last():
    packs = [_pack("resumed", 100), _pack("resumed", 110),  # its first attempt
             _pack("later", 200), _pack("later", 250),  # another sweep, started and finished meanwhile
             _pack("resumed", 300), _pack("resumed", 320)]  # the resume
    latest = sweep_latest(packs)
    assert latest == {"resumed": 320, "later": 250}
    assert max(latest, key=latest.get) == "resumed"
