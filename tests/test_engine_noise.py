"""The batched engines' Gaussian and Laplace noise, measured directly (docs/privacy.md, "How the step is tested").

A pack must equal its runs alone (tests/test_packs.py), but a noise bug planted in both paths at once keeps them equal:
the equivalence cannot see it, and the white-box audit, a lower bound, does not move for a few percent. Here every
method with a batched engine and an audit view releases one step of its engine for many configurations from one
state, at q = 1 on a slice of Adult, so that every configuration sums the same rows: its release minus its release
without noise (the same state and batch, ``private=False``) is the noise the engine added. Divided by the scale the
view declares for each block (the engine's own settings, which tests/test_step_accountant.py ties to the accountant),
a Gaussian block's noise must have mean 0 and standard deviation 1, a Laplace block's mean 0 and mean absolute value
1: the scale to within a tolerance that a 3 % scale error clears by more than six standard errors. The seeds are
fixed, so the test is deterministic. Each bug of tests/planted_bugs.py (``ENGINE_NOISE_BUGS``) must turn it red, with
the same bug planted in the single-run step as well (there, a pack still equals its runs alone).
"""

from __future__ import annotations

import functools
import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

from raco_bench.methods import REGISTRY
from raco_bench.methods.lagrangian.audit import lagrangian_view
from raco_bench.packs.tensors import take_rows

sys.path.insert(0, str(Path(__file__).parent))
from mutants import load_mutant  # noqa: E402
from planted_bugs import ENGINE_NOISE_BUGS  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIGURATIONS = 4096  # configurations per engine call (DP post-processing: 8,192, for its one histogram release per run)
# Draws per kind: the standard error of a Gaussian std from N draws is 1/√(2N) (0.22 % at 100,000), of a Laplace mean |z|
# 1/√N (0.26 % at 150,000). The tolerances are 4.5 standard errors; a 3 % error is then 9 and 7 standard errors beyond.
DRAWS = {"gauss": 100_000, "laplace": 150_000}
TOL = {"gauss": 0.01, "laplace": 0.012}
MEAN_TOL = 5.0  # the mean, in standard errors
ROWS = 16  # the slice of Adult's training rows every configuration sums (batch_size = ROWS: q = 1)
# method -> (T, hyperparameters): the methods' default noise at a fixed T, whatever ε it spends (the budget is EPSILON). One
# step's gradient release is over 100,000 draws; RaCO-DP's histogram has 4 cells a step (10 steps), DP post-processing's 8 once.
ENGINES = {"raco-dp": (10, {}), "dp-sgd": (1, {}), "dp-fermi": (1, {"noise_multiplier": 2.0}), "dp-postprocess": (1, {"privacy": "full"}),
           "toy-dp-sgd": (1, {})}
EPSILON = 50.0


@pytest.fixture(autouse=True)
def _toy(monkeypatch):
    monkeypatch.setitem(REGISTRY, "toy-dp-sgd", "toy_plugin.plugin:ToyDPSGD")


@functools.lru_cache(maxsize=1)
def views() -> dict:
    """Each engine's audit view, and the Lagrangian engine's torch form (what a GPU runs) beside its compiled one. A view
    calls its engine's functions through their modules, so a bug planted after it is built is the one it runs."""
    from raco_bench.data.catalog import load_table
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    table = load_table("adult")
    idx = table.split(0)
    ds = table.dataset(0, "public", {**idx, "train": idx["train"][:ROWS]})
    out = {}
    for method, (steps, params) in ENGINES.items():
        cfg = RunConfig(dataset="adult", method=method, epsilon=EPSILON, steps=steps, params={"batch_size": ROWS, **params},
                        randomness="reproducible")
        run = prepare_run(cfg, ds)
        out[method] = run.method.audit_view(run, 0)
        if method == "raco-dp":
            out["raco-dp (torch form)"] = lagrangian_view(run, 0, fused=False)
    return out


def engine_noise(view, kinds: dict[str, str], configurations: int = CONFIGURATIONS) -> dict[str, torch.Tensor]:
    """Per release block, the engine's noise in units of its declared scale, from enough configurations that every kind
    has :data:`DRAWS` draws (each chunk of configurations takes the view's every release from its starting state)."""
    out: dict[str, list] = {name: [] for name in kinds}
    counts = dict.fromkeys(kinds, 0)
    first = 0
    while any(counts[name] < DRAWS[kind] for name, kind in kinds.items()):
        seeds = torch.arange(first, first + configurations, dtype=torch.int64)
        first += configurations
        s, exact = view.repeated(seeds), view.repeated(seeds, private=False)
        state = take_rows(view.state, torch.zeros(configurations, dtype=torch.long))
        for _ in range(view.phases(int(view.settings.steps[0]))):
            blocks, raw = view.release(state, "D", s)
            without, _ = view.release(state, "D", exact)
            for name in blocks:
                z = (blocks[name].double() - without[name].double()) / view.scale(name, state, configurations).double()[:, None]
                out[name].append(z.reshape(-1))
                counts[name] += z.numel()
            state = view.apply(state, s, raw)
    return {name: torch.cat(parts) for name, parts in out.items()}


def check_engine_noise(view, label: str) -> None:
    kinds = {name: kind for name, (kind, _) in view.noise.items()}
    for name, z in engine_noise(view, kinds, 2 * CONFIGURATIONS if label == "dp-postprocess" else CONFIGURATIONS).items():
        kind, n = kinds[name], z.numel()
        scale = float(z.std()) if kind == "gauss" else float(z.abs().mean())
        mean_se = 1.0 / math.sqrt(n) if kind == "gauss" else math.sqrt(2.0 / n)
        assert abs(scale - 1.0) <= TOL[kind], (f"{label}: the engine's {kind} noise on {name!r} has scale {scale:.4f} of what its "
                                               f"settings declare ({n} draws)")
        assert abs(float(z.mean())) <= MEAN_TOL * mean_se, f"{label}: the engine's noise on {name!r} has mean {float(z.mean()):.4g}"


def test_every_batched_engine_adds_the_noise_its_settings_declare():
    for label, view in views().items():
        check_engine_noise(view, label)


def plant(monkeypatch, bugs) -> list[str]:
    """Plant every bug of ``bugs`` at once: each module's mutant, and each name it ``replaces`` ("package.module.name" or
    "package.module:Class.name") pointed at the mutant's. Returns the mutants' module names (to unregister)."""
    planted = []
    for bug in bugs:
        real = importlib.import_module(bug.module)
        mutant = load_mutant(Path(real.__file__).read_text(), list(bug.edits), bug.effect, "engine_noise_mutant_", bug.module)
        planted.append(mutant.__name__)
        for target in bug.replaces:
            where, _, attr = target.rpartition(".")
            module_name, _, inner = where.partition(":")
            owner, source = importlib.import_module(module_name), mutant
            for part in filter(None, inner.split(".")):
                owner, source = getattr(owner, part), getattr(source, part)
            monkeypatch.setattr(owner, attr, getattr(source, attr))
    return planted


@pytest.mark.parametrize("name", list(ENGINE_NOISE_BUGS), ids=[k.split(" ")[1] for k in ENGINE_NOISE_BUGS])
def test_each_planted_engine_noise_bug_turns_the_direct_check_red(name, monkeypatch, adult):
    """The bug planted in the engines and in the single-run steps at once: a pack still equals its run alone (the
    equivalence is blind to it), and the direct measurement of every engine it reaches goes red."""
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import execute, prepare_run
    from raco_bench.training.pack import train_pack

    bug = ENGINE_NOISE_BUGS[name]
    planted = plant(monkeypatch, bug.bugs)
    try:
        cfg = RunConfig(method="raco-dp", epsilon=50.0, steps=3, params={"batch_size": 256}, randomness="reproducible")
        pack, alone = train_pack([prepare_run(cfg, adult)])[0], execute(prepare_run(cfg, adult))
        for k, value in alone.final_params.items():
            assert abs(pack.final_params[k] - value).max() <= 1e-5 * max(1.0, abs(value).max()), f"{name}: the pack differs from its run alone"
        every = views()
        missed = []
        for label in bug.red:
            try:
                check_engine_noise(every[label], label)
                missed.append(label)
            except AssertionError as exc:
                print(f"{name}: {exc}")
        assert not missed, f"the planted bug {name!r} left the noise check of {missed} green"
    finally:
        for module in planted:
            sys.modules.pop(module, None)
