"""A compact live console for sweeps: one progress line per phase at most every few seconds
(configurations done, running, failed, ETA; a Tune trial is a pack of configurations) and, when the
phase ends, the best feasible configurations so far. Tune's own tables are shown with ``-v`` instead.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from ray import tune

from raco_bench.progress import bar, duration

STATUS_DONE, STATUS_ERROR, STATUS_RUNNING = "TERMINATED", "ERROR", "RUNNING"


class PhaseProgress(tune.Callback):
    """Prints ``[phase N] done/total done, R running, F failed, elapsed, ETA`` every ``every`` seconds. A pack counts as
    done once it reported that its configurations are recorded in MLflow (not when Tune merely ended it, as it does
    on an interrupt); the driver states the recorded count from MLflow itself when the phase ends."""

    def __init__(self, phase: int, total: int, gammas: tuple[float, ...], every: float = 15.0, stream: TextIO | None = None, top: int = 3):
        self.phase, self.total, self.gammas, self.every, self.top = phase, total, tuple(gammas), every, top
        self.stream = stream or sys.stdout
        self.start = time.monotonic()
        self.last = 0.0
        self.results: list[tuple[dict, dict]] = []

    def _line(self, trials) -> str:
        size = lambda t: len(t.config["pack"]["members"]) if "pack" in t.config else 1  # noqa: E731
        done = sum(size(t) for t in trials if (t.last_result or {}).get("recorded") == 1.0)  # in MLflow, not merely ended
        failed = sum(size(t) for t in trials if t.status == STATUS_ERROR)
        running = sum(size(t) for t in trials if t.status == STATUS_RUNNING)
        elapsed = time.monotonic() - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = duration((self.total - done - failed) / rate) if rate > 0 else "?"
        return (f"[phase {self.phase}] {bar(done, self.total)} {done}/{self.total} done, {running} running, {failed} failed, "
                f"{duration(elapsed)} elapsed, ETA {eta}")

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(self._line(trials), file=self.stream, flush=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        members = (trial.last_result or {}).get("members")
        if isinstance(members, str):
            for m in json.loads(members):
                self.results.append((m, m))

    def on_experiment_end(self, trials, **info):
        print(self._line(trials), file=self.stream, flush=True)
        for line in best_feasible(self.results, self.top, self.gammas):
            print(line, file=self.stream, flush=True)


def best_feasible(results: list[tuple[dict, dict]], top: int, gammas: tuple[float, ...]) -> list[str]:
    """The ``top`` single runs with the best validation accuracy among those meeting a γ on validation (their
    own γ, or for methods trained without γ the smallest sweep γ they meet, shown in the γ column)."""
    rows = []
    for trial, r in results:
        con, acc = r.get("val_max_constraint"), r.get("val_accuracy")
        con, acc = (-1.0 if con is None else con), (-1.0 if acc is None else acc)  # skipped: no metrics
        met = [trial["gamma"]] if trial.get("gamma") is not None else [g for g in sorted(gammas) if con <= g][:1]
        if acc < 0 or con < 0 or not met or con > met[0]:
            continue
        rows.append((acc, {**trial, "gamma": met[0]}, con))
    rows.sort(key=lambda x: -x[0])
    if not rows:
        return ["  no run met its gamma on validation yet"]
    out = [f"  best feasible runs: {'method':10s} {'eps':>5s} {'gamma':>6s} {'config':>6s} {'val acc':>8s} {'val constraint':>14s}"]
    for acc, t, con in rows[:top]:
        out.append(f"  {'':20s}{t['method']:10s} {str(t['epsilon']):>5s} {str(t['gamma']):>6s} {t['config_id']:>6d} {acc:>8.4f} {con:>14.4f}")
    return out
