"""How small a γ a study's validation and test splits can tell apart from zero (docs/results.md, "Noise floor").

A split is a sample of rows, so every rate it measures has sampling noise: a group of n rows measures its
positive rate with a standard deviation of up to ½/√n, whatever the classifier. When that noise is as large as
γ, whether a model "meets γ" on the split says more about which rows landed in it than about the model; a
selection rule that keeps only configurations meeting γ on validation then keeps the lucky ones (or the constant
predictor, which meets every gap constraint on every split).

The floor is measured with the suite's own evaluation (eq. 6, hard predictions): ``draws`` classifiers that
predict each row's class by a fair coin, independently of the row, are evaluated on each split; each constraint
value's deviation from its mean over the draws is pure sampling noise. The floor is the median, over draws, of
the largest deviation among the constraints (for a gap constraint, the max constraint of a classifier that is
fair by construction), with its 90th percentile. With two classes (every dataset of the suite) the coin is at ½,
the largest variance a rate of 0/1 predictions can have, so the floor bounds the sampling noise of any
classifier's rates on that split; with more classes the coin is uniform over them and the floor is a typical
noise, not a bound.

The splits' rows are evaluation data, not the protected training set (docs/privacy.md, "Threat model"), so the
floor releases nothing the reported metrics do not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from raco_bench.constraints.families import Task, family
from raco_bench.constraints.problem import RateProblem
from raco_bench.report.cell_tables import if_loadable, rows_for
from raco_bench.training.evaluation import EvalSplit, evaluate_logits

NOISE_FLOOR = "noise_floor.csv"  # beside a study's parts: the floor of its dataset and constraint
COLUMNS = ("dataset", "constraint", "split", "rows", "smallest_group_rows", "floor_median", "floor_p90", "draws")
DRAWS = 1000
CHUNK = 100  # coin draws evaluated at once (rows × CHUNK predictions in memory)


def split_floor(split: EvalSplit, problem: RateProblem, draws: int = DRAWS, seed: int = 0) -> tuple[float, float]:
    """(median, 90th percentile) over ``draws`` fair coins of the largest deviation of a constraint value of ``problem`` from
    its mean over the draws, on ``split``."""
    n_groups, n_classes = problem.partition.n_groups, problem.partition.n_classes
    rates = problem.compile(split.X.device)
    generator = torch.Generator().manual_seed(seed)
    values = []
    for start in range(0, draws, CHUNK):
        k = min(CHUNK, draws - start)
        pred = torch.randint(0, n_classes, (len(split.y), k), generator=generator)
        logits = torch.zeros(len(split.y), n_classes, k)
        gammas = torch.zeros(k, problem.n_constraints)
        metrics = evaluate_logits(logits, split, [1.0] * k, n_groups, n_classes, rates, gammas, pred=pred, losses=False)
        values += [m["constraint_values"] for m in metrics]
    v = np.asarray(values, dtype=float)  # draws × J
    deviation = np.nanmax(np.abs(v - np.nanmean(v, axis=0)), axis=1)  # |·|: a one-sided constraint (an FNR bound) deviates both ways
    return float(np.median(deviation)), float(np.quantile(deviation, 0.9))


def split_floor_row(ds, name: str, constraint: str, draws: int = DRAWS, seed: int = 0, spec: str | None = None) -> dict:
    """The floor of the loaded dataset ``ds``'s split ``name`` (val, test) under ``constraint`` (a custom one: its ``spec``): a
    row of :data:`COLUMNS`."""
    problem = family(constraint, spec).problem(Task.of(ds), 0.0)
    split = getattr(ds, name)
    evaluated = EvalSplit.for_problem(split, problem, torch.device("cpu"))
    median, p90 = split_floor(evaluated, problem, draws, seed)
    present = np.bincount(split.group, minlength=ds.n_groups)
    return dict(dataset=ds.name, constraint=constraint, split=name, rows=len(split.y), smallest_group_rows=int(present[present > 0].min()),
                floor_median=median, floor_p90=p90, draws=draws)


def noise_floor(dataset: str, constraint: str, draws: int = DRAWS, seed: int = 0, schema: str | None = None, data: str | None = None,
                spec: str | None = None) -> pd.DataFrame:
    """The floor of ``dataset``'s validation and test splits under ``constraint`` (a custom one: its ``spec``; the sweeps'
    split, seed 0), one row per split (:data:`COLUMNS`); a user's dataset is read from its ``schema`` and ``data`` files."""
    from raco_bench.data import load_dataset

    ds = load_dataset(dataset, download=False, schema=schema, data=data)
    return pd.DataFrame([split_floor_row(ds, name, constraint, draws, seed, spec) for name in ("val", "test")], columns=list(COLUMNS))


def write_noise_floor(folder: Path, dataset: str, constraint: str, schema: str | None = None, data: str | None = None,
                      spec: str | None = None) -> Path:
    """Measure and write ``folder/noise_floor.csv`` (deterministic: the same file for the same split and constraint)."""
    path = folder / NOISE_FLOOR
    noise_floor(dataset, constraint, schema=schema, data=data, spec=spec).round(4).to_csv(path, index=False)
    return path


def read_noise_floor(folder: Path, dataset: str, constraint: str) -> pd.DataFrame | None:
    """The page's floor when it was measured for this dataset and constraint, else None."""
    return rows_for(folder / NOISE_FLOOR, dataset, constraint)


def validation_floor(floor: pd.DataFrame | None) -> float:
    """The validation split's median floor (what decides selection); NaN when there is none."""
    val = floor[floor["split"] == "val"]["floor_median"] if floor is not None else pd.Series(dtype=float)
    return float(val.iloc[0]) if len(val) else float("nan")


def measured_noise_floor(folder: Path, dataset: str, constraint: str, schema: str | None = None,
                         data: str | None = None, spec: str | None = None) -> tuple[pd.DataFrame | None, list[Path]]:
    """``folder``'s floor for ``dataset`` and ``constraint``, measured and written first when it has none (seeded: the
    same file wherever it is made), and the files written. None when it has none and the dataset cannot be loaded
    here (nothing is downloaded for a page; a user's dataset whose ``schema`` or ``data`` file is not here)."""
    floor = read_noise_floor(folder, dataset, constraint)
    if floor is not None:
        return floor, []
    path = if_loadable(lambda: write_noise_floor(folder, dataset, constraint, schema, data, spec))
    if path is None:
        return None, []
    return read_noise_floor(folder, dataset, constraint), [path]
