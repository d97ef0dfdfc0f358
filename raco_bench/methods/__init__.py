"""Method plugins: RaCO-DP here, the baselines in the top-level ``baselines`` package."""

from __future__ import annotations

from raco_bench.methods.base import Context, Method


def registry() -> dict[str, type[Method]]:
    from baselines import DPSGD, SGD, SGDA, DPFermi
    from raco_bench.methods.raco_dp import RacoDP

    return {cls.name: cls for cls in (RacoDP, SGDA, DPFermi, DPSGD, SGD)}


METHOD_NAMES = ("raco-dp", "sgda", "dp-fermi", "dp-sgd", "sgd")


def get_method(name: str) -> Method:
    methods = registry()
    try:
        return methods[name]()
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(methods)}") from None


__all__ = ["Context", "Method", "METHOD_NAMES", "get_method", "registry"]
