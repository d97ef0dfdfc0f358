"""The figures' mark of a capped model (:mod:`raco_bench.report.spending`): a hollow ring around its point, and the
legend entry that explains it with the cap on T."""

from __future__ import annotations

import numpy as np
import pandas as pd

RING_SIZE = 140  # marker area of the ring, in points²: around a reported point's marker, not on it
CAPPED_LABEL = "ring: capped, T reached the cap ({cap}) with < 90 % of ε spent (values on the page)"


def ring(ax, xs, ys, marked, color: str) -> None:
    """A hollow ring around each point where ``marked`` (None: nothing is marked)."""
    if marked is None:
        return
    keep = np.asarray(marked, dtype=bool)
    if keep.any():
        ax.scatter(np.asarray(xs, dtype=float)[keep], np.asarray(ys, dtype=float)[keep], s=RING_SIZE, facecolor="none", edgecolor=color,
                   linewidths=1.2, zorder=2.5)  # under the markers: a ring never hides another method's point


def capped_cap(frame: pd.DataFrame) -> str:
    """The caps on T of the capped points in ``frame`` (``capped`` and ``max_steps`` columns), "" when none is capped."""
    if "capped" not in frame or not frame["capped"].astype(bool).any():
        return ""
    return "/".join(f"{c:g}" for c in sorted(set(frame.loc[frame["capped"].astype(bool), "max_steps"].dropna())))


def capped_handle():
    """The legend's ring."""
    from matplotlib.lines import Line2D

    return Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="0.2", color="0.2", linestyle="", markersize=10)
