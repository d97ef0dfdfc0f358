"""Overlapping text and hidden markers in a rendered matplotlib figure.

Text: every visible label (titles, axis labels, the tick labels actually drawn, legend entries, annotations,
captions) as its box on the canvas, and every pair of boxes that intersect. Markers: every marker of the artists a
figure names as its selected points (gid :data:`SELECTED`: the selected configurations) as a disc on the canvas,
and every pair of which one hides the other (:func:`hides`), so that no selected point is drawn under another.
:func:`raco_bench.report.figures.save` warns with :class:`LayoutWarning` for each figure that has either; the test
suite turns that warning into an error (``pyproject.toml``), so no figure with colliding text or hidden markers passes.
"""

from __future__ import annotations

import warnings
from itertools import combinations

TOLERANCE_PX = 1.0  # boxes that share at most this many pixels in either direction touch, they do not overlap


class LayoutWarning(UserWarning):
    """A figure has text drawn over other text."""


def _drawn_tick_labels(axis) -> list:
    low, high = sorted(axis.get_view_interval())
    labels = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        loc = tick.get_loc()
        if loc is None or not (low - 1e-12 * max(1.0, abs(high)) <= loc <= high + 1e-12 * max(1.0, abs(high))):
            continue  # a tick outside the view is not drawn (its label keeps a stale position)
        labels += [t for t in (tick.label1, tick.label2) if t.get_visible()]
    return labels


def visible_texts(fig) -> list:
    """Every piece of text the figure draws."""
    texts = list(fig.texts)
    for attr in ("_suptitle", "_supxlabel", "_supylabel"):
        if getattr(fig, attr, None) is not None:
            texts.append(getattr(fig, attr))
    legends = list(fig.legends)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        texts += _drawn_tick_labels(ax.xaxis) + _drawn_tick_labels(ax.yaxis)
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for legend in legends:
        texts += list(legend.get_texts()) + ([legend.get_title()] if legend.get_title().get_text() else [])
    unique = {id(t): t for t in texts}  # the figure's own texts include its suptitle and supxlabel
    return [t for t in unique.values() if t.get_visible() and t.get_text().strip()]


def overlapping_texts(fig, tolerance_px: float = TOLERANCE_PX) -> list[tuple[str, str]]:
    """The pairs of visible texts whose boxes intersect by more than ``tolerance_px`` in both directions."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in visible_texts(fig)]
    return [(a, b) for (a, box_a), (b, box_b) in combinations(boxes, 2) if boxes_overlap(box_a, box_b, tolerance_px)]


def boxes_overlap(box_a, box_b, tolerance_px: float = TOLERANCE_PX) -> bool:
    """Whether two boxes on the canvas share more than ``tolerance_px`` pixels in both directions."""
    dx = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
    dy = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
    return dx > tolerance_px and dy > tolerance_px


def _warn(pairs: list[tuple[str, str]], name: str, what: str) -> list[tuple[str, str]]:
    if pairs:
        shown = "; ".join(f"{a!r} over {b!r}" for a, b in pairs[:5])
        warnings.warn(LayoutWarning(f"{name}: {len(pairs)} overlapping {what} pair(s): {shown}"), stacklevel=3)
    return pairs


def warn_overlaps(fig, name: str) -> list[tuple[str, str]]:
    return _warn(overlapping_texts(fig), name, "text")


# ------------------------------------------------------------------------------------------ markers
SELECTED = "selected"  # the gid of the artists whose markers a figure names (its selected points and their rings)


def selected_markers(fig) -> list[tuple[object, str, float, float, float]]:
    """Every marker of the figure's :data:`SELECTED` artists as (axes, label, x, y, radius), in display pixels: the
    markers of lines (errorbars) and of scatter collections (rings)."""
    import numpy as np

    fig.canvas.draw()
    px_per_pt = fig.dpi / 72.0
    found = []
    for ax in fig.axes:
        for line in ax.lines:
            if line.get_gid() == SELECTED and line.get_marker() not in (None, "", "None", " "):
                xy = ax.transData.transform(np.asarray(line.get_xydata(), dtype=float))
                found += [(ax, line.get_label(), x, y, line.get_markersize() * px_per_pt / 2) for x, y in xy if np.isfinite([x, y]).all()]
        for coll in ax.collections:
            if coll.get_gid() == SELECTED and len(coll.get_offsets()):
                sizes = np.broadcast_to(coll.get_sizes(), (len(coll.get_offsets()),))
                xy = ax.transData.transform(np.asarray(coll.get_offsets(), dtype=float))
                found += [(ax, coll.get_label(), x, y, np.sqrt(s) * px_per_pt / 2) for (x, y), s in zip(xy, sizes) if np.isfinite([x, y]).all()]
    return found


def hides(distance: float, ra: float, rb: float) -> bool:
    """Whether two markers of radii ``ra``, ``rb`` with centres ``distance`` apart (pixels) hide one another: the centre
    of one lies inside the other (then at least about two fifths of the smaller is covered). Markers that only touch
    or overlap at their edges stay readable, and are allowed."""
    return distance < max(ra, rb)


def overlapping_markers(fig) -> list[tuple[str, str]]:
    """The pairs of the figure's selected markers (:func:`selected_markers`) of which one hides the other (:func:`hides`)."""
    found = []
    for (ax_a, a, xa, ya, ra), (ax_b, b, xb, yb, rb) in combinations(selected_markers(fig), 2):
        if ax_a is ax_b and hides(((xa - xb) ** 2 + (ya - yb) ** 2) ** 0.5, ra, rb):
            found.append((a, b))
    return found


def warn_marker_overlaps(fig, name: str) -> list[tuple[str, str]]:
    return _warn(overlapping_markers(fig), name, "marker")
