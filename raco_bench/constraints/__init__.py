"""Rate constraints: partitions, constraint definitions, builders, the family registry and histogram evaluation."""

from raco_bench.constraints.builders import custom, demographic_parity, equalized_odds, false_negative_rate
from raco_bench.constraints.families import FAMILIES, Family, Task, build_constraint, family
from raco_bench.constraints.partition import Partition
from raco_bench.constraints.problem import CompiledRates, RateConstraint, RateProblem
from raco_bench.constraints.spec import ConstraintSpecError

__all__ = [
    "FAMILIES", "Family", "Task", "build_constraint", "family", "custom", "demographic_parity", "equalized_odds", "false_negative_rate",
    "Partition", "CompiledRates", "RateConstraint", "RateProblem", "ConstraintSpecError",
]
