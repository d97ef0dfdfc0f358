"""Selected points that would hide each other, set apart sideways (docs/results.md, "Figures").

Two methods' selected configurations can land on the same spot of a panel (RaCO-DP's γ = 0.1 point under DP
post-processing's, say). Once a panel's limits are fixed, :func:`dodge` moves each point that another placed before it
would hide (:func:`raco_bench.report.overlap.hides`) sideways, by half marker widths (right, left, twice as far right,
…), to the first place where none hides it: its y value and its bars are kept, and its x is off by a fraction of a
millimetre, which the figure's key says. Markers that only touch are left where they are, and rings (hollow, drawn
under the markers) hide nothing. :func:`raco_bench.report.overlap.overlapping_markers` checks the result.
"""

from __future__ import annotations

import numpy as np

GAP_PX = 1.5  # clearance between two markers' discs, in pixels
TRIES = 12  # sideways places tried per point: ±1 … ±6 steps


def nearest_first(tries: int = TRIES) -> list[int]:
    """Offsets in steps, nearest first: 0, +1, −1, +2, −2, … ±tries/2 (the places a point or a label is tried at)."""
    return [0] + [s * m for m in range(1, tries // 2 + 1) for s in (1, -1)]


def dodge(ax, xs, ys, radii_pt) -> tuple[np.ndarray, int]:
    """``xs`` moved sideways so that no marker (centre (x, y), radius in points) of ``ax`` hides another, given its current
    limits; the number of points moved. Points with a non-finite coordinate are left as they are."""
    x = np.asarray(xs, dtype=float).copy()
    y = np.asarray(ys, dtype=float)
    r = np.asarray(radii_pt, dtype=float) * ax.figure.dpi / 72.0
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        return x, 0
    px = ax.transData.transform(np.column_stack([np.where(ok, x, 0.0), np.where(ok, y, 0.0)]))
    step = float(r[ok].max()) + GAP_PX
    placed: list[int] = []
    moved = 0
    for i in sorted(np.flatnonzero(ok), key=lambda i: (px[i, 0], px[i, 1])):
        for k in nearest_first():
            cx = px[i, 0] + k * step
            if all(np.hypot(cx - px[j, 0], px[i, 1] - px[j, 1]) >= max(r[i], r[j]) + GAP_PX for j in placed):
                moved += k != 0
                px[i, 0] = cx
                break
        placed.append(i)
    back = ax.transData.inverted().transform(px)
    x[ok] = back[ok, 0]
    return x, moved
