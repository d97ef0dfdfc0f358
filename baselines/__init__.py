"""Baseline methods that run alongside RaCO-DP: DP-FERMI, non-private SGDA, DP-SGD and SGD."""

from baselines.dp_fermi import DPFermi
from baselines.sgda import DPSGD, SGD, SGDA

__all__ = ["DPFermi", "DPSGD", "SGD", "SGDA"]
