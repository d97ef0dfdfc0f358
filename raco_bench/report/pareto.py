"""Non-dominated points for (constraint value, error), both minimised."""

from __future__ import annotations

import numpy as np


def non_dominated(points: np.ndarray) -> np.ndarray:
    """Boolean mask of the points that no other point dominates.

    q dominates p when q ≤ p in both coordinates and q < p in at least one. Duplicated points are
    all kept (none strictly dominates the other). Points with a NaN coordinate are never on the front.
    """
    pts = np.asarray(points, dtype=float)
    finite = np.all(np.isfinite(pts), axis=1)
    keep = finite.copy()
    for i in np.flatnonzero(finite):
        others = pts[finite]
        dominated = np.any(np.all(others <= pts[i], axis=1) & np.any(others < pts[i], axis=1))
        keep[i] = not dominated
    return keep


def frontier(points: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points, ordered by the first coordinate (for drawing the front)."""
    idx = np.flatnonzero(non_dominated(points))
    return idx[np.argsort(np.asarray(points, dtype=float)[idx, 0], kind="stable")]
