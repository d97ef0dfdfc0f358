"""Values written beside points drawn at an axis's edge, set apart so that none covers another text.

A selected point far outside the rest is drawn at the edge of the axis with its value (▲ at the top, ▶ at the right:
:mod:`raco_bench.report.figures`). Two such points at nearly the same height (or place along the top) would write
their values over each other; :func:`set_apart` moves each label along its edge, by its own height (right edge) or
width (top edge), to the nearest place where it covers no other text of the figure. It runs when a figure is saved,
after the layout is final, so that the distances it measures are those drawn.
"""

from __future__ import annotations

from matplotlib.text import Annotation

from raco_bench.report.dodge import nearest_first
from raco_bench.report.overlap import TOLERANCE_PX, boxes_overlap, visible_texts

ALONG_Y = "edge-label-right"  # gid of a value at the right edge: moved up or down
ALONG_X = "edge-label-top"  # gid of a value at the top edge: moved sideways
GAP_PX = 1.0 + TOLERANCE_PX


def edge_label(ax, text: str, xy: tuple[float, float], offset_pt: tuple[float, float], ha: str, color: str, along: str) -> Annotation:
    """A value written at ``offset_pt`` from ``xy`` (data coordinates) that :func:`set_apart` may move ``along`` its edge."""
    if along not in (ALONG_X, ALONG_Y):
        raise ValueError(f"along is {along!r}; it takes {ALONG_X!r} or {ALONG_Y!r}")
    return ax.annotate(text, xy, textcoords="offset points", xytext=offset_pt, ha=ha, fontsize=6, color=color, gid=along)


def set_apart(fig) -> int:
    """Move each edge label of ``fig`` along its edge until it covers no other text (:func:`edge_label`); the number
    moved. A label with no free place within :data:`~raco_bench.report.dodge.TRIES` steps is left where it was (the overlap check reports it)."""
    labels = [t for ax in fig.axes for t in ax.texts if t.get_gid() in (ALONG_X, ALONG_Y) and t.get_visible()]
    if not labels:
        return 0
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pt_per_px = 72.0 / fig.dpi
    mine = {id(t) for t in labels}
    taken = [t.get_window_extent(renderer) for t in visible_texts(fig) if id(t) not in mine]
    moved = 0
    for label in sorted(labels, key=lambda t: tuple(t.axes.transData.transform(t.xy))):
        start = tuple(label.xyann)
        box = label.get_window_extent(renderer)
        vertical = label.get_gid() == ALONG_Y
        step = ((box.height if vertical else box.width) + GAP_PX) * pt_per_px
        for k in nearest_first():  # 0, +1, −1, … ±6 label sizes
            label.xyann = (start[0], start[1] + k * step) if vertical else (start[0] + k * step, start[1])
            box = label.get_window_extent(renderer)
            if not any(boxes_overlap(box, other) for other in taken):
                moved += k != 0
                break
        else:
            label.xyann = start
            box = label.get_window_extent(renderer)
        taken.append(box)
    return moved
