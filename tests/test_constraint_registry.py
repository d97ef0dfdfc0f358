"""Constraint families come from one registry (raco_bench/constraints/families.py), and a custom constraint from text.

A registered family declares its builder, its test-time gap metric and axis label, what a constant predictor scores on
it, the capability the methods read and a summary; a family lacking any is caught here. A toy family registered in a
test (one registry entry, with its own gap metric) trains under RaCO-DP and SGDA, is evaluated, logged and drawn by the
report with no other change. A custom constraint written as text means what it says (its value is the hand-computed
rate difference of the trained model) and names what a dataset lacks before anything is trained.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from raco_bench.constraints import builders, families, gaps
from raco_bench.constraints.families import CUSTOM, FAMILIES, NOTIONS, Family, Task, best_constant_accuracy, custom_family, declared
from raco_bench.constraints.gaps import CONSTRAINT_VALUE, GAPS, Gap
from raco_bench.constraints.partition import Partition
from raco_bench.constraints.problem import RateProblem
from raco_bench.constraints.spec import ConstraintSpecError
from raco_bench.methods import METHOD_NAMES, get_method

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "synthetic"
BINARY, THREE = Task(("a", "b"), ("no", "yes")), Task(("a", "b", "c"), ("x", "y", "z"))


def missing_parts(fam: Family) -> list[str]:
    """What a registered family fails to declare, as the suite reads it; empty when complete."""
    from raco_bench.records.results import columns
    from raco_bench.report.references import quantities
    from raco_bench.sweeps.trial import curve_keys, metric_keys
    from raco_bench.training.evaluation import fairness_gaps

    out = []
    problems = {}
    for task in (BINARY, THREE):
        try:
            problem = fam.problem(task, 0.1)
        except Exception as exc:  # noqa: BLE001 - any failure is a missing builder
            out.append(f"build: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(problem, RateProblem) or (problem.partition.n_groups, problem.partition.n_classes) != (task.n_groups, task.n_classes):
            out.append("build: not a rate problem of the task")
        elif not np.allclose(problem.gamma, 0.1):
            out.append("build: the slack is not gamma")
        problems[task] = problem
    if fam.gap != CONSTRAINT_VALUE:
        if fam.gap not in GAPS:
            out.append(f"gap: {fam.gap!r} is no registered gap metric")
        else:
            pred = torch.tensor([[0, 1, 1, 0, 1, 0]])
            measured = fairness_gaps(pred, torch.tensor([0, 1, 1, 1, 0, 0]), torch.tensor([0, 0, 1, 1, 0, 1]), 2, 2)[0]
            if fam.gap not in measured:
                out.append(f"gap: evaluation does not measure {fam.gap!r}")
            if fam.gap_column not in columns() or fam.gap not in quantities() or fam.gap not in metric_keys() or fam.gap not in curve_keys():
                out.append(f"gap: {fam.gap!r} does not reach the results, the references, the trial's metrics or curves")
    if not isinstance(fam.axis, str) or not fam.axis.strip():
        out.append("axis: no label")
    if BINARY in problems:
        try:
            bar = fam.constant(problems[BINARY], [0.7, 0.3])
        except Exception as exc:  # noqa: BLE001
            out.append(f"constant: {type(exc).__name__}: {exc}")
        else:
            if bar is not None and not (isinstance(bar, float) and 0.0 <= bar <= 1.0):
                out.append(f"constant: {bar!r} is not an accuracy")
    if fam.notion is not None and fam.notion not in NOTIONS:
        out.append(f"notion: {fam.notion!r} is none of {NOTIONS}")
    if not fam.summary:
        out.append("summary: none")
    for name in METHOD_NAMES:
        answer = get_method(name).supports(fam)
        if not (answer is None or (isinstance(answer, str) and answer)):
            out.append(f"supports: {name} answers {answer!r}")
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_registered_family_declares_every_part(name):
    assert missing_parts(FAMILIES[name]) == []


def _broken_builder(task: Task, gamma: float) -> RateProblem:
    raise KeyError("no builder")


@pytest.mark.parametrize("broken,part", [
    (dict(build=_broken_builder), "build"), (dict(gap="tpr_gap"), "gap"), (dict(axis=" "), "axis"),
    (dict(constant=lambda problem, shares: 2.0), "constant"), (dict(notion="fair"), "notion"), (dict(summary=""), "summary"),
])
def test_a_family_lacking_a_part_is_caught(broken, part):
    fam = dataclasses.replace(FAMILIES["demographic-parity"], **broken)
    assert any(m.startswith(part) for m in missing_parts(fam)), missing_parts(fam)


def test_the_constant_bar_meets_the_constraint_and_is_the_best_such_constant():
    """best_constant_accuracy against a grid of constant predictors: the best accuracy among those whose constraint values
    (eq. 6 of a constant π: π_k on every subset) meet γ, for the registered families and two custom ones."""
    shares = np.array([0.8, 0.2])
    cases = [FAMILIES[n].problem(BINARY, g) for n in FAMILIES for g in (0.0, 0.3)]
    cases += [custom_family("c", s).problem(BINARY, 0.2) for s in ("FNR(group=a) <= gamma; FPR(group=b)", "0.5*PR() + 0.5*TPR(group=a)")]
    for problem in cases:
        A = problem.weight_tensor().sum(1)
        best = max((p * shares[1] + (1 - p) * shares[0] for p in np.linspace(0, 1, 10001) if np.all(A @ [1 - p, p] <= problem.gamma + 1e-9)),
                   default=None)
        found = best_constant_accuracy(problem, shares)
        assert (found is None and best is None) or found == pytest.approx(best, abs=1e-4), problem.name


# ------------------------------------------------------------------------------------------ custom constraints as text
def test_a_spec_compiles_to_the_rate_problem_it_says():
    problem = custom_family("fnr-gap", "|FNR(group=a) - FNR(group=b)|").problem(BINARY, 0.1)
    part = Partition("label_group", 2, 2)  # FNR conditions on the label: (label, group) cells
    assert problem.partition == part and problem.n_constraints == 2
    first = problem.constraints[0]
    assert first.subsets == ((part.part(label=1, group=0),), (part.part(label=1, group=1),))
    assert first.weights.tolist() == [[1.0, 0.0], [-1.0, 0.0]]  # + P̃_0(D_{y=1,a}) − P̃_0(D_{y=1,b})
    assert problem.constraints[1].weights.tolist() == [[-1.0, 0.0], [1.0, 0.0]]
    pr = custom_family("pr", "PR(group=a) - 0.5*PR(group!=a)").problem(THREE_BINARY := Task(("a", "b", "c"), ("no", "yes")), 0.2)
    assert pr.partition.kind == "group" and pr.constraints[0].subsets == ((0,), (1, 2)) and pr.gamma.tolist() == [0.2]
    assert pr.constraints[0].weights.tolist() == [[0.0, 1.0], [0.0, -0.5]]
    by_label = custom_family("l", "P(pred=z | label=x) + P(pred=z | label!=x)").problem(THREE, 0.1)
    assert by_label.partition.kind == "label" and by_label.constraints[0].subsets == ((0,), (1, 2))
    assert custom_family("q", "P(pred=\">50K\" | group=a)").problem(Task(("a", "b"), ("<=50K", ">50K")), 0.1).constraints[0].weights.tolist() == [[0.0, 1.0]]
    assert THREE_BINARY.n_groups == 3


@pytest.mark.parametrize("text,message", [
    ("FNR(group=c)", "unknown group 'c' in FNR(group=c); the groups of this dataset are 'a', 'b'"),
    ("FNR(group=A)", "unknown group 'A' in FNR(group=A) (did you mean 'a'?)"),
    ("P(pred=maybe | group=a)", "unknown class 'maybe' in P(pred=maybe | group=a); the classes of this dataset are 'no', 'yes'"),
    ("P(pred=yes | label=true)", "unknown class 'true' in P(pred=yes | label=true)"),
    ("FNR(group=a, group!=a)", "FNR(group=a, group!=a) selects no (label, group) cell"),
    ("FNR(label=yes)", "FNR fixes the label"),
    ("FNRR(group=a)", "unknown rate 'FNRR' (did you mean FNR?)"),
    ("FNR(grp=a)", "expected a condition group=NAME or label=NAME"),
    ("FNR(group=a) <= 0.1", "the slack is the run's gamma"),
    ("|FNR(group=a)", "expected '|' to close the absolute value"),
    ("FNR(group=a) - FNR(group=a)", "is identically zero"),
    ("", "empty; write a sum of rates"),
])
def test_a_spec_that_names_what_the_dataset_lacks_is_refused_with_the_name_and_the_fix(text, message):
    with pytest.raises(ConstraintSpecError, match="constraint 'x'") as caught:
        custom_family("x", text).problem(BINARY, 0.1)
    assert message in str(caught.value)


def test_shorthands_need_a_binary_label():
    with pytest.raises(ConstraintSpecError, match="FNR is for a binary label.*3 classes.*P\\(pred=CLASS"):
        custom_family("x", "FNR(group=a)").problem(THREE, 0.1)


def test_a_schema_declares_constraints_by_name_and_a_run_records_their_text():
    from raco_bench.data.catalog import dataset_schema

    schema = dataset_schema(schema=EXAMPLE / "synthetic.yaml")
    assert declared("fnr-gap", None, schema.constraints) == ("fnr-gap", schema.constraints["fnr-gap"])
    assert declared("demographic-parity", None, schema.constraints) == ("demographic-parity", None)
    assert declared(None, "PR(group=a) - PR(group=b)", schema.constraints) == (CUSTOM, "PR(group=a) - PR(group=b)")
    with pytest.raises(ConstraintSpecError, match="unknown constraint 'fnr-gaps'.*one your schema declares: fnr-gap"):
        declared("fnr-gaps", None, schema.constraints)
    with pytest.raises(ConstraintSpecError, match="cannot take the name of the registered family"):
        declared("equalized-odds", "PR(group=a)", schema.constraints)
    with pytest.raises(ConstraintSpecError, match="is declared by the schema as"):
        declared("fnr-gap", "PR(group=a)", schema.constraints)


@pytest.mark.parametrize("argv,message", [
    (["--constraint-spec", "FNR(group=c) - FNR(group=a)"], "unknown group 'c' in FNR(group=c); the groups of this dataset are 'a', 'b'"),
    (["--constraint", "fnr-gapp"], "unknown constraint 'fnr-gapp'"),
    (["--constraint-spec", "FNR(group=a)", "--method", "dp-fermi"], "dp-fermi cannot train under 'custom': dp-fermi regularises"),
])
def test_train_refuses_a_bad_constraint_before_reading_the_table(argv, message, capsys, tmp_path, monkeypatch):
    from raco_bench import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("raco_bench.data.catalog.read_table", lambda path: pytest.fail("the table was read"))
    code = cli.main(["train", "--schema", str(EXAMPLE / "synthetic.yaml"), "--no-mlflow", *argv])
    assert code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_custom_constraint_trains_under_raco_dp_and_sgda_and_its_value_is_the_hand_computed_rate_gap(one_torch_thread):
    """The schema's fnr-gap, |FNR(a) − FNR(b)| ≤ γ: each run's test constraint value is the FNR gap of its model's test
    predictions, counted here by hand."""
    from raco_bench.data import load_dataset
    from raco_bench.data.catalog import dataset_schema
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import train

    ds = load_dataset(schema=EXAMPLE / "synthetic.yaml")
    spec = declared("fnr-gap", None, dataset_schema(schema=EXAMPLE / "synthetic.yaml").constraints)[1]
    assert spec == "|FNR(group=a) - FNR(group=b)|"
    for method in ("raco-dp", "sgda"):
        cfg = RunConfig(dataset=ds.name, schema=str(EXAMPLE / "synthetic.yaml"), method=method, constraint="fnr-gap", constraint_spec=spec,
                        gamma=0.1, epsilon=3.0, steps=60, randomness="reproducible", params={"batch_size": 64})
        result = train(cfg, ds)
        w, b = result.reported_params["weight"], result.reported_params["bias"]
        pred = np.argmax(ds.test.X @ w.T + b, axis=1)
        fnr = [np.mean(pred[(ds.test.y == 1) & (ds.test.group == g)] == 0) for g in (0, 1)]
        assert result.reported["test"]["max_constraint"] == pytest.approx(abs(fnr[0] - fnr[1]), abs=1e-6), method  # float32 rates
        assert result.dataset["n_constraints"] == 2 and result.config["constraint_spec"] == spec


# ------------------------------------------------------------------------------------------ a toy family: one entry
def equal_opportunity(task: Task, gamma: float) -> RateProblem:
    """TPR(a) − TPR(not a) ≤ γ for every group a: the toy family's builder (binary labels)."""
    part = Partition("label_group", task.n_groups, task.n_classes)
    cons = [{"subsets": [[part.part(label=1, group=a)], [part.part(label=1, group=b) for b in range(task.n_groups) if b != a]],
             "weights": [[0.0, 1.0], [0.0, -1.0]], "gamma": gamma, "name": f"eop[a={a}]"} for a in range(task.n_groups)]
    return builders.custom(part, cons, "toy-opportunity")


def tpr_gap(counts: torch.Tensor) -> torch.Tensor | None:
    """(max_a − min_a) P(ŷ = 1 | y = 1, a) over groups with positives: the toy family's gap metric."""
    positives = counts[:, 1]  # K × a × ŷ
    present = positives[0].sum(-1) > 0
    rates = positives[:, present, 1] / positives[0, present].sum(-1)
    return rates.max(1).values - rates.min(1).values


TOY = Family("toy-opportunity", lambda task, gamma: equal_opportunity(task, gamma) if task.n_classes == 2 else builders.equalized_odds(
                 task.n_groups, task.n_classes, gamma),
             gap="tpr_gap", axis="test true-positive-rate gap (between groups)", constant=best_constant_accuracy, notion=None,
             gap_is_constraint=True, summary="TPR(a) − TPR(not a) ≤ γ for every group a (equal opportunity)")


@pytest.fixture
def toy_family(monkeypatch):
    monkeypatch.setitem(gaps.GAPS, "tpr_gap", Gap("tpr_gap", tpr_gap, "true-positive-rate gap"))
    monkeypatch.setitem(families.FAMILIES, TOY.name, TOY)
    return TOY


def sweep_in_packs(spec, tmp_path: Path):
    """Phase 1 (two seeds) and phase 2 (one seed) of RaCO-DP and SGDA at one ε and γ under ``spec``'s constraint, trained
    in packs of 4 into a fresh store as a sweep's trials are (40 steps each), read back and reported: (uri, experiment id,
    results table, report)."""
    from raco_bench import tracking
    from raco_bench.records.results import read_results
    from raco_bench.report.build import build_report
    from raco_bench.sweeps.plan import make_packs, make_trial
    from raco_bench.sweeps.trial import execute_pack

    trials = [make_trial(spec, phase, method, 8.0 if method == "raco-dp" else None, 0.1, 0, {"batch_size": 64}, seed)
              for phase, seeds in ((1, (0, 1)), (2, (1000,))) for method in ("raco-dp", "sgda") for seed in seeds]
    for t in trials:
        t["steps"] = 40
        if t["phase"] == 2:
            t["selected_gammas"] = [0.1]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = tracking.get_or_create_experiment(uri, spec.experiment)
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {})
    for phase in (1, 2):
        for pack in make_packs([t for t in trials if t["phase"] == phase], 4):
            execute_pack(pack, uri, exp, parent, "cpu")
    table = read_results(uri, exp, spec.sweep_id)
    assert len(table) == len(trials) and set(table["method"]) == {"raco-dp", "sgda"} and (table["skipped"] == "").all()
    return uri, exp, table, build_report(spec.experiment, uri, tmp_path / "report", log_to_mlflow=False)


def test_a_toy_family_is_one_registry_entry_and_is_trained_evaluated_logged_and_drawn(toy_family, tmp_path, one_torch_thread):
    """Registered by one entry (and its gap metric), the toy family trains under RaCO-DP and SGDA in packs, each
    configuration's table row and run record its gap, its curve is logged, and the report draws its gap figure."""
    from raco_bench import tracking
    from raco_bench.sweeps.spec import SweepSpec

    assert missing_parts(toy_family) == []
    spec = SweepSpec(dataset="synthetic", constraint=TOY.name, epsilons=(8.0,), gammas=(0.1,), n_configs=1, phase1_seeds=2, phase2_seeds=1,
                     max_steps=60, eval_every=20, randomness="reproducible")
    assert set(spec.methods) >= {"raco-dp", "sgda"} and not set(spec.methods) & {"dp-fermi", "pf-ld"}  # they read the family's notion
    uri, exp, table, report = sweep_in_packs(spec, tmp_path)
    assert table["test_tpr_gap"].notna().all() and np.allclose(table["test_tpr_gap"], table["test_max_constraint"])  # 2 groups: the gap
    runs = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    assert len(runs) == 2 and all("test_tpr_gap" in r.data.metrics for r in runs)  # the phase-2 runs
    history = tracking.client(uri).get_metric_history(runs[0].info.run_id, "eval/test_tpr_gap")
    assert [m.step for m in history] == [1, 20, 40]
    names = {p.name for p in report.files}
    assert {"pareto.png", "tpr_gap.png"} <= names, names
    runs_csv = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert math.isfinite(runs_csv["test_tpr_gap"].iloc[0])


def test_a_custom_constraint_trained_in_packs_is_recorded_and_reported_with_its_value(tmp_path, one_torch_thread):
    """A sweep's trials under a spec written on the command line: RaCO-DP and SGDA train in packs, every row and run
    records the spec, the report's runs and Pareto figure carry its test value, labelled with the spec."""
    from raco_bench import tracking
    from raco_bench.sweeps.spec import SweepSpec

    text = "|FNR(group=a) - FNR(group=b)|"
    spec = SweepSpec(dataset="synthetic", constraint="fnr-gap", constraint_spec=text, epsilons=(8.0,), gammas=(0.1,), n_configs=1,
                     phase1_seeds=2, phase2_seeds=1, max_steps=60, eval_every=20, randomness="reproducible")
    assert set(spec.methods) >= {"raco-dp", "sgda"} and not set(spec.methods) & {"dp-fermi", "pf-ld"}
    uri, exp, table, report = sweep_in_packs(spec, tmp_path)
    assert (table["constraint"] == "fnr-gap").all() and (table["constraint_spec"] == text).all()
    assert table["test_max_constraint"].between(0, 1).all()
    runs = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    assert len(runs) == 2 and {r.data.params["run.constraint_spec"] for r in runs} == {text}
    assert "pareto.png" in {p.name for p in report.files}
    runs_csv = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert set(runs_csv["constraint_spec"]) == {text} and runs_csv["test_max_constraint"].notna().all()
    from raco_bench.report.study import family_of

    assert family_of(runs_csv).axis == f"test {text}"  # the Pareto figure's x-axis label: the spec


# ------------------------------------------------------------------------------------------ a spec equal to a built-in family
def dp_spec(task: Task) -> str:
    """Demographic parity (eqs. 7, 13) written as a custom spec: P(ŷ=k | a) − P(ŷ=k | not a) for every class k and group a,
    in the builder's order (class-major)."""
    return "; ".join(f"P(pred={k} | group={a}) - P(pred={k} | group!={a})" for k in task.class_names for a in task.group_names)


def eo_spec(task: Task) -> str:
    """Equalized odds (eqs. 14-16) as a spec: P(ŷ=k | y, a) − P(ŷ=k | y, not a) for every k, y, a, in the builder's order."""
    return "; ".join(f"P(pred={k} | label={y}, group={a}) - P(pred={k} | label={y}, group!={a})"
                     for k in task.class_names for y in task.class_names for a in task.group_names)


EQUAL = {"demographic-parity": dp_spec, "equalized-odds": eo_spec, "false-negative-rate": lambda task: "FNR()"}


@pytest.mark.parametrize("name", list(EQUAL))
def test_a_spec_equal_to_a_builtin_family_gives_its_constraint_values(name, one_torch_thread):
    """Written as text, each built-in family's constraints give the built-in family's values, constraint by constraint:
    hard values of 8 random linear models on the synthetic test split (through the evaluation a run uses), and soft
    values from a histogram of random probabilities on a three-group, three-class task (DP and EO; the FNR spec is for
    binary labels). A wrong sign, weight, subset or partition in the spec's compilation makes them differ."""
    from raco_bench.data import load_dataset
    from raco_bench.training.evaluation import EvalSplit, evaluate_linear

    ds = load_dataset(schema=EXAMPLE / "synthetic.yaml")
    task = Task.of(ds)
    builtin, written = FAMILIES[name].problem(task, 0.05), custom_family("written", EQUAL[name](task)).problem(task, 0.05)
    assert written.partition == builtin.partition and written.n_constraints == builtin.n_constraints
    gen = torch.Generator().manual_seed(0)
    K, d = 8, ds.test.X.shape[1]
    weight, bias = torch.randn(K, 2, d, generator=gen, dtype=torch.float64), torch.randn(K, 2, generator=gen, dtype=torch.float64)
    values = []
    for problem in (builtin, written):
        split = EvalSplit.for_problem(ds.test, problem, torch.device("cpu"))
        split = EvalSplit(split.X.double(), split.y, split.group, split.parts)
        rates = problem.compile(dtype=torch.float64)
        metrics = evaluate_linear(weight, bias, split, [1.0] * K, ds.n_groups, ds.n_classes, rates, torch.full((K, problem.n_constraints), 0.05,
                                                                                                              dtype=torch.float64))
        values.append(np.array([m["constraint_values"] for m in metrics]))
    assert np.ptp(values[0]) > 0.05  # the models' values differ: the comparison can see a wrong constraint
    np.testing.assert_allclose(values[1], values[0], rtol=0, atol=1e-12)
    if name != "false-negative-rate":
        problems = [FAMILIES[name].problem(THREE, 0.05), custom_family("written", EQUAL[name](THREE)).problem(THREE, 0.05)]
        probs = torch.softmax(2 * torch.randn(90, 3, generator=gen, dtype=torch.float64), 1)
        parts = torch.as_tensor(problems[0].partition.assign(np.arange(90) % 3, (np.arange(90) // 3) % 3))
        soft = [p.compile(dtype=torch.float64) for p in problems]
        np.testing.assert_allclose(soft[1].values(soft[1].histogram(probs, parts)).numpy(), soft[0].values(soft[0].histogram(probs, parts)).numpy(),
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("task", [BINARY, THREE], ids=["binary", "three-class"])
def test_a_registered_familys_value_range_holds_every_predictors_constraint_value(task):
    """``Family.value_range`` is what a report clips intervals to (raco_bench/report/ranges.py), so it must hold the
    largest constraint value (eq. 6) of every predictor: random hard and soft predictions on every part, and the extreme
    ones (each part predicted one class). Demographic parity's and equalized odds' lower end 0 is reached by a constant
    predictor, their upper end 1 by one that predicts a class on one group only."""
    rng = np.random.default_rng(5)
    for fam in FAMILIES.values():
        assert fam.value_range is not None, f"{fam.name} declares no value range"
        low, high = fam.value_range
        problem = fam.problem(task, 0.0).compile(dtype=torch.float64)
        P, c = problem.n_parts, problem.n_classes
        sizes = rng.integers(0, 50, (400, P, 1))  # a part may have no rows (its rates are 0)
        soft = rng.dirichlet(np.full(c, 0.3), (400, P)) * sizes
        hard = np.eye(c)[rng.integers(0, c, (400, P))] * sizes
        values = problem.values(torch.as_tensor(np.concatenate([soft, hard]))).max(-1).values
        assert float(values.min()) >= low - 1e-12 and float(values.max()) <= high + 1e-12, fam.name
        assert float(values.max()) == pytest.approx(high)  # the upper end is reached (FNR: a part predicted all negative)
        if fam.notion is not None:
            constant = problem.values(torch.as_tensor(np.broadcast_to(np.eye(c)[0], (P, c)).copy())).max()
            assert float(constant) == pytest.approx(low)
