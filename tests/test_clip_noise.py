"""One planted-bug harness for every engine (raco_bench/privacy/clip_noise.py; docs/privacy.md, "Clipping and noise").

Every batched engine and the models' clipped sums clip and noise through one module. A bug planted there once
(clipping switched off, the Gaussian noise left out) reaches every method, and the white-box audit of each goes red:
RaCO-DP, DP-SGD, DP-FERMI, DP post-processing (its base steps), budget tailoring (its group sums; clipping only: its
noise is its own) and the toy plugin of tests/toy_plugin. The same audits of the real module stay below their claim
(tests/test_whitebox_audit.py, tests/test_whitebox_views.py, tests/test_toy_plugin.py)."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
from mutants import load_mutant

from raco_bench.audit.whitebox import WhiteBoxAudit, run_whitebox
from raco_bench.methods import REGISTRY
from raco_bench.privacy import clip_noise

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUGS = {  # the edits, and the functions of the mutant that replace the module's
    "clipping switched off": ([("    factor = torch.rsqrt(norms_sq).mul_(clip).clamp_(max=1.0)", "    factor = torch.ones_like(norms_sq)"),
                               ("rr[i] * (C / max(C, math.sqrt(rr[i] * rr[i] * q[i]))) * m[i]", "rr[i] * m[i]")],  # the compiled pass
                              ("clip_factors", "clip_rank_one")),
    "Gaussian noise left out": ([("        out.append(block + std.view(", "        out.append(block + 0 * std.view(")], ("add_gaussian",)),
}
AUDITS = {  # small audits: each bug gives a true ε far above the claim
    "raco-dp": WhiteBoxAudit(method="raco-dp", runs=2_000, rows=64, sampling_rate=1.0),
    "dp-sgd": WhiteBoxAudit(method="dp-sgd", runs=2_000, rows=64, sampling_rate=1.0),
    "dp-fermi": WhiteBoxAudit(method="dp-fermi", runs=2_000, rows=64, sampling_rate=1.0),
    "dp-postprocess": WhiteBoxAudit(method="dp-postprocess", runs=2_000, rows=64, sampling_rate=1.0, params=(("privacy", "full"),)),
    "budget-tailoring": WhiteBoxAudit(method="budget-tailoring", runs=2_000, rows=256, params=(("allocation", "equal"),)),
    "toy-dp-sgd": WhiteBoxAudit(method="toy-dp-sgd", runs=2_000, rows=64, sampling_rate=1.0),
}
NOISE_OF_ITS_OWN = {"budget-tailoring"}  # its Gaussian releases are noised in its own code (group sums, zCDP stds)


@pytest.fixture(autouse=True)
def _setup(monkeypatch):
    monkeypatch.setitem(REGISTRY, "toy-dp-sgd", "toy_plugin.plugin:ToyDPSGD")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_bug_planted_once_turns_every_method_audit_red(bug, monkeypatch):
    edits, names = BUGS[bug]
    module = load_mutant((ROOT / "raco_bench/privacy/clip_noise.py").read_text(), edits, bug, "clip_noise_mutant_", "raco_bench/privacy/clip_noise.py")
    try:
        for name in names:
            monkeypatch.setattr(clip_noise, name, getattr(module, name))
        missed = []
        for method, audit in AUDITS.items():
            if "add_gaussian" in names and method in NOISE_OF_ITS_OWN:
                continue
            r = run_whitebox(audit)
            if not r.bound.epsilon_lower > r.claimed_epsilon:
                missed.append(r.summary())
    finally:
        sys.modules.pop(module.__name__, None)
    assert not missed, f"{bug} not caught:\n" + "\n".join(missed)
