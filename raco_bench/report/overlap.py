"""Overlapping text in a rendered matplotlib figure: every visible label (titles, axis labels, the tick labels
actually drawn, legend entries, annotations, captions) as its box on the canvas, and every pair of boxes that
intersect. :func:`raco_bench.report.figures.save` warns with :class:`LayoutWarning` for each figure that has
one; the test suite turns that warning into an error (``pyproject.toml``), so no figure with colliding text passes.
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
    found = []
    for (a, box_a), (b, box_b) in combinations(boxes, 2):
        dx = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        dy = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if dx > tolerance_px and dy > tolerance_px:
            found.append((a, b))
    return found


def warn_overlaps(fig, name: str) -> list[tuple[str, str]]:
    pairs = overlapping_texts(fig)
    if pairs:
        shown = "; ".join(f"{a!r} over {b!r}" for a, b in pairs[:5])
        warnings.warn(LayoutWarning(f"{name}: {len(pairs)} overlapping text pair(s): {shown}"), stacklevel=3)
    return pairs
