"""Rate constraints: partitions, constraint definitions, builders and histogram evaluation."""

from raco_bench.constraints.builders import (
    BUILDERS,
    build_constraint,
    custom,
    demographic_parity,
    equalized_odds,
    false_negative_rate,
)
from raco_bench.constraints.partition import Partition
from raco_bench.constraints.problem import CompiledRates, RateConstraint, RateProblem

__all__ = [
    "BUILDERS", "build_constraint", "custom", "demographic_parity", "equalized_odds", "false_negative_rate",
    "Partition", "CompiledRates", "RateConstraint", "RateProblem",
]
