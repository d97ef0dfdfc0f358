"""Sampling, noise and exact privacy accounting. The names below are imported on first use (dp-accounting with them), so
that :mod:`raco_bench.privacy.counter_rng` and :mod:`raco_bench.privacy.clip_noise` import where dp-accounting is
not installed (a GPU machine training a benchmark kit: ``raco-bench bench throughput --kit``)."""

from importlib import import_module

_EXPORTS = {
    "HISTOGRAM_BATCH_MODES": "accounting", "StepMechanism": "accounting", "epsilon": "accounting", "max_steps": "accounting",
    "separate_composition_epsilon": "accounting", "step_pld": "accounting", "CalibrationCache": "calibration",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"raco_bench.privacy.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'raco_bench.privacy' has no attribute {name!r}")
