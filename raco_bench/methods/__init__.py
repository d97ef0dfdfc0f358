"""The method registry: the one place that lists methods (docs/architecture.md, "Adding a method").

Each entry maps a method's name to ``module:Class``; classes are imported on first use, so listing
names costs nothing (the command line's help stays instant). Adding a method is one file (a
:class:`~raco_bench.methods.base.Method` subclass) and one line here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raco_bench.methods.base import Method

REGISTRY: dict[str, str] = {
    "raco-dp": "raco_bench.methods.lagrangian.plugin:RacoDP",
    "sgda": "raco_bench.methods.lagrangian.plugin:SGDA",
    "dp-fermi": "baselines.dp_fermi.plugin:DPFermi",
    "dp-fermi-a-only": "baselines.dp_fermi.plugin:DPFermiAttributeOnly",
    "dp-sgd": "raco_bench.methods.lagrangian.plugin:DPSGD",
    "sgd": "raco_bench.methods.lagrangian.plugin:SGD",
    "pf-ld": "baselines.pf_ld.plugin:PFLD",
    "dp-postprocess": "baselines.dp_postprocess.plugin:DPPostprocess",
    "budget-tailoring": "baselines.budget_tailoring.plugin:BudgetTailoring",
}
METHOD_NAMES = tuple(REGISTRY)
DEFAULT_METHOD = "raco-dp"  # the suite's own method: the default of `train` and the audits, the reference of comparisons


def method_class(name: str) -> type[Method]:
    try:
        module, cls = REGISTRY[name].split(":")
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(REGISTRY)}") from None
    return getattr(importlib.import_module(module), cls)


def get_method(name: str) -> Method:
    return method_class(name)()


def registry() -> dict[str, type[Method]]:
    return {name: method_class(name) for name in REGISTRY}


def default_methods(family) -> tuple[str, ...]:
    """The methods a sweep runs when it names none: those marked for default sweeps that support the constraint ``family``
    (a :class:`raco_bench.constraints.families.Family`)."""
    return tuple(n for n, cls in registry().items() if cls.in_default_sweeps and cls().supports(family) is None)


def timing_reference() -> str:
    """The method whose step time the benchmarks divide by."""
    return next(n for n, cls in registry().items() if cls.timing_reference)


__all__ = ["DEFAULT_METHOD", "METHOD_NAMES", "REGISTRY", "default_methods", "get_method", "method_class", "registry", "timing_reference"]
