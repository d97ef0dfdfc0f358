"""The step's privacy checks on the real step, and a mutation check: each planted privacy bug in a copy of
raco_bench/methods/lagrangian/step.py must turn at least one check red (docs/privacy.md, "How the step is tested")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import privacy_checks as checks  # noqa: E402
from mutants import first_catch, load_mutant  # noqa: E402

from raco_bench.methods.lagrangian import step as real_step  # noqa: E402

STEP_SOURCE = Path(real_step.__file__).read_text()
CHECKS = (checks.check_sensitivity, checks.check_gaussian_noise, checks.check_laplace_noise)

_CLIPPED_SUM = "    grads = model.lagrangian_grad_sum(state.params, batch, probs, coef, s.temperature, s.clip_norm)"

# (name, [(old, new), ...]): every `old` must occur exactly once in step.py, so a refactor that moves the
# code makes this test fail loudly instead of silently testing nothing.
MUTATIONS = {
    "regulariser gradient added outside the clip": [(_CLIPPED_SUM, """\
    grads = model.lagrangian_grad_sum(state.params, batch, probs, None, s.temperature, s.clip_norm)
    full = model.lagrangian_grad_sum(state.params, batch, probs, coef, s.temperature, None)
    loss = model.lagrangian_grad_sum(state.params, batch, probs, None, s.temperature, None)
    grads = {k: grads[k] + full[k] - loss[k] for k in grads}""")],
    "Gaussian noise at 0.96 sigma C": [("alpha=s.noise_std)", "alpha=0.96 * s.noise_std)")],
    "Laplace scale 0.97 s_L": [("H = H + s.laplace_scale * stream.laplace(", "H = H + 0.97 * s.laplace_scale * stream.laplace(")],
    "divide by the actual batch size": [("alpha=-s.lr / s.expected_batch)", "alpha=-s.lr / max(len(idx), 1))")],
    "n-hat from the exact histogram": [
        ("        if s.laplace_scale is not None:  # line 3", "        H_exact = H\n        if s.laplace_scale is not None:  # line 3"),
        ("        coef = data.parts_onehot(rows) @ coef_parts",
         "        coef_parts = rates.part_coefficients(state.lam, rates.subset_sizes(H_exact)) * s.expected_batch\n"
         "        coef = data.parts_onehot(rows) @ coef_parts"),
    ],
    "clip at 1.05 C": [("coef, s.temperature, s.clip_norm)", "coef, s.temperature, 1.05 * s.clip_norm)")],
    "histogram released without noise": [
        ("                H = H + s.laplace_scale * stream.laplace(t, H.numel(), dtype=H.dtype).view_as(H)", "                pass")],
}


def mutant(name: str):
    return load_mutant(STEP_SOURCE, MUTATIONS[name], name, "raco_bench_mutant_step_", "step.py")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_real_step_passes(check):
    check(real_step)


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_planted_privacy_bug_turns_a_check_red(name):
    module = mutant(name)
    failures = first_catch(module, CHECKS)
    print(f"{name}: caught by {failures}")
    assert failures, f"no privacy check caught the planted bug {name!r}"


# A custom constraint (docs/constraints.md) goes through the same step: its partition is one of the three kinds, so each row
# is in one part and the Laplace histogram's L1 sensitivity is 1 whatever its rates, overlapping subsets included
# (PR(group=2) and PR() share rows; FNR and FPR condition on the label, so the parts are the (label, group) cells).
CUSTOM_SPEC = "|FNR(group=2) - FNR(group!=2)|; PR(group=2) - PR(); 0.5*FPR(group=0) + 0.5*FNR(group=1)"
# what a custom constraint's histogram would release if it were counted per subset of its rates rather than per part:
# each row weighted by the number of subsets that hold its part (L1 sensitivity up to that number, noise calibrated for 1)
PER_SUBSET = [("        H = _histogram(state, data, model, s, rows, probs)  # line 2",
               "        H = _histogram(state, data, model, s, rows, probs) * rates.membership.sum(0)[:, None].to(probs.dtype)  # line 2")]


def custom_problem():
    from raco_bench.constraints.families import Task, custom_family

    problem = custom_family("toy-custom", CUSTOM_SPEC).problem(Task.sized(3, 2), 0.02)
    assert problem.partition.kind == "label_group" and problem.n_constraints == 4
    return problem


def test_the_step_under_a_custom_constraint_has_the_sensitivity_the_accountant_assumes():
    checks.check_sensitivity(real_step, problem=custom_problem())


def test_a_custom_constraints_histogram_counted_per_subset_turns_the_sensitivity_check_red():
    module = load_mutant(STEP_SOURCE, PER_SUBSET, "per-subset histogram", "raco_bench_mutant_step_", "step.py")
    problem = custom_problem()

    def check_sensitivity_custom(step_mod):
        checks.check_sensitivity(step_mod, problem=problem)

    failures = first_catch(module, (check_sensitivity_custom,))
    assert failures and "check_sensitivity_custom" in failures[0], "the per-subset histogram of a custom constraint was not caught"
