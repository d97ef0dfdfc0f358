"""Sampling, noise and exact privacy accounting."""

from raco_bench.privacy.accounting import (
    HISTOGRAM_BATCH_MODES,
    StepMechanism,
    epsilon,
    max_steps,
    separate_composition_epsilon,
    step_pld,
)
from raco_bench.privacy.calibration import CalibrationCache

__all__ = [
    "HISTOGRAM_BATCH_MODES", "StepMechanism", "epsilon", "max_steps", "separate_composition_epsilon", "step_pld",
    "CalibrationCache",
]
