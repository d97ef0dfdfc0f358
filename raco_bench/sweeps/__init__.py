"""Ray Tune sweeps with MLflow tracking: the paper's two-phase protocol over every method."""

from raco_bench.sweeps.spec import SweepSpec

__all__ = ["SweepSpec"]
