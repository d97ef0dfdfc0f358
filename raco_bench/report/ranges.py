"""The values a reported quantity can take, so that an interval or a bar never claims values it cannot have
(docs/results.md, "Repeats and intervals").

A t interval over two or three repeats is wide (12.7 standard errors either side with two): the mean test error of
two repeats, one a constant predictor at 0.50 and one a model at 0.08, has the interval [−2.38, 2.96]. The mean of a
quantity that lies in [a, b] lies in [a, b] too, so the interval clipped to [a, b] still holds it whenever the
unclipped one does: clipping drops no coverage, and a verdict (does the interval of a difference exclude 0?) never
changes, since 0 is inside the range of every difference. A figure's bars (an interval, or mean ± sd over seeds)
are clipped the same way.

* test error and accuracy, the share of runs meeting γ: [0, 1];
* a gap metric: what it declares (``Gap.value_range``: [0, 1] for the registered ones, a rate or the largest
  difference between groups of a rate), and no clipping for one that declares none;
* the constraint value: what its family declares (``Family.value_range``: [0, 1] for the registered ones), and no
  clipping for a custom constraint (a weighted sum of rates can be negative or above 1);
* the worst-group loss, steps and ε spent: at least 0;
* a difference of two: the difference of the ranges (an error difference: [−1, 1]).
"""

from __future__ import annotations

import math

import pandas as pd

from raco_bench.constraints.gaps import GAPS

Range = tuple[float, float]
UNIT: Range = (0.0, 1.0)
NONNEGATIVE: Range = (0.0, math.inf)


def value_ranges(rows: pd.DataFrame) -> dict[str, Range]:
    """Column -> the range of its values (the module docstring), for a study's (or a page's) rows: the constraint
    value's from their family, when the rows name one."""
    from raco_bench.report.study import family_of

    ranges = {"test_error": UNIT, "test_accuracy": UNIT, "share_meeting": UNIT, "test_worst_group_loss": NONNEGATIVE,
              "steps": NONNEGATIVE, "epsilon_spent": NONNEGATIVE,
              **{f"test_{k}": gap.value_range for k, gap in GAPS.items() if gap.value_range is not None}}
    if len(rows) and "constraint" in rows:
        declared = family_of(rows).value_range
        if declared is not None:
            ranges["test_max_constraint"] = declared
    return ranges


def difference(of: Range) -> Range:
    """The range of A − B when A and B both lie in ``of``."""
    return of[0] - of[1], of[1] - of[0]
