"""Paper-style figures: Pareto frontiers (paper Fig. 2), constraint satisfaction (Fig. 3), accuracy vs FNR.

Colours and markers are fixed per method across every figure, as each method plugin declares them: Paul Tol's
colour-blind-safe "bright" scheme plus black and grey, each with its own marker, so the 8 methods stay distinct
in colour and in shape (docs/results.md, "Figures"). Each figure states δ, the checkpoint rule and what was read
outside the budget; the legend states each method's privacy notion. The words follow one convention: the
*constraint value* is the largest of a run's constraint quantities (``max_constraint``: a gap, a rate), the
*violation* is its excess over γ, max(0, value − γ) (``max_violation``). Figures are written as PDF and PNG, and
checked for overlapping text when saved (:mod:`raco_bench.report.overlap`).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from raco_bench.report.dodge import dodge  # noqa: E402
from raco_bench.report.edge_labels import ALONG_X, ALONG_Y, edge_label, set_apart  # noqa: E402
from raco_bench.report.marks import CAPPED_LABEL, capped_cap, capped_handle, ring  # noqa: E402
from raco_bench.report.overlap import SELECTED, warn_marker_overlaps, warn_overlaps  # noqa: E402
from raco_bench.report.pareto import frontier  # noqa: E402
from raco_bench.report.ranges import Range, value_ranges  # noqa: E402
from raco_bench.report.references import reference_label  # noqa: E402

PALETTE = [("#332288", "P"), ("#882255", "<"), ("#117733", ">"), ("#DDCC77", "p")]  # Tol colours no registered method declares


def method_styles(df: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """(colour, marker) per method, as its plugin declares it today (so a store logged under older colours is drawn in
    today's), else as its runs logged it (the ``method_style`` tag, for a method this installation does not know);
    methods with neither get the next colour-blind-safe fallback that no registered method uses."""
    from raco_bench.methods import registry

    known = {name: cls.style for name, cls in registry().items()}
    styles: dict[str, tuple[str, str]] = {m: known[m] for m in set(df["method"]) if m in known}
    if "style" in df.columns:
        for method, tag in df.dropna(subset=["style"]).groupby("method")["style"].first().items():
            if method not in styles and tag and "," in tag:
                colour, marker = tag.split(",", 1)
                styles[method] = (colour, marker)
    spare = iter(PALETTE * 4)
    for method in sorted(set(df["method"]) - set(styles)):
        styles[method] = next(spare)
    return styles


def short_notion(notion: str) -> str:
    """The privacy notion of a run, as a legend says it."""
    text = str(notion or "")
    if text in ("", "none", "nan"):
        return "non-private"
    if "sensitive-attribute" in text:
        short = "A-only DP"
    elif "zCDP" in text:
        short = "record DP via zCDP"
    else:
        short = "record DP"
    return short + (", uses A at prediction" if "GROUP AT PREDICTION" in text else "")


def method_labels(df: pd.DataFrame) -> dict[str, str]:
    """Legend label per method: its name and the privacy notion(s) of its runs, so that no figure compares unlike
    guarantees without saying so (e.g. "pf-ld [A-only DP]", "dp-postprocess [record DP, uses A at prediction]"); a
    series of another pipeline says which after the notion ("raco-dp [record DP] (paper pipeline, OUTSIDE THE BUDGET)",
    :mod:`raco_bench.report.series`). When the methods' protocols differ (a ``protocol`` column), each label ends with
    its own ("; reduced protocol")."""
    labels = {}
    protocols = df.groupby("method")["protocol"].agg(lambda p: " + ".join(sorted(set(p) - {""}))) if "protocol" in df else pd.Series(dtype=str)
    differ = protocols.nunique() > 1
    for method, notions in df.groupby("method")["privacy_notion"]:
        shorts = sorted({short_notion(n) for n in notions})
        base, _, pipeline = str(method).partition(" (")
        labels[method] = f"{base} [{'; '.join(shorts)}]" + (f" ({pipeline}" if pipeline else "")
        if differ and protocols.get(method):
            labels[method] += f"; {protocols[method]}"
    return labels


def _eps_label(eps: float) -> str:
    return "ε = ∞ (non-private)" if not math.isfinite(eps) else f"ε = {eps:g}"


def privacy_caption(df: pd.DataFrame) -> str:
    deltas = sorted({d for d in df["delta"].dropna()})
    notions = sorted({short_notion(n) for n in df["privacy_notion"] if n and n != "none"})
    delta = ", ".join(f"{d:g}" for d in deltas) or "n/a"
    checkpoints = sorted({c for c in df.get("checkpoint", pd.Series(dtype=str)).dropna() if c}) or ["unknown"]
    outside = sorted({o for cell in df.get("outside_budget", pd.Series(dtype=str)).dropna() for o in str(cell).split(" | ") if o and o != "none"})
    accounted = df[df.get("tuning", pd.Series("not-accounted", index=df.index)) == "accounted"]
    if len(accounted):
        ends = sorted({round(float(e), 3) for e in accounted["epsilon_end_to_end"].dropna()})
        tuning = (f"Hyperparameter tuning IS privacy-accounted: each private method's point is the model released by a private "
                  f"{accounted['tuning_note'].iloc[0]} (non-private methods are searched the same way, spending nothing); ε is that model's "
                  f"end-to-end ε by privacy profiles, tuning included (spent: {', '.join(f'{e:g}' for e in ends)}). The claim is per released model: "
                  "the figure shows several repetitions and budgets, which together spend more." + _joint_releases(accounted))
    else:
        tuning = "Hyperparameter tuning is not privacy-accounted."
    a_only = " A-only DP protects only the group (x and y public): NOT comparable with record DP." if any("A-only" in n for n in notions) else ""
    which = "(every method)" if len(checkpoints) == 1 else "(per series: the legend names each pipeline other than the default)"
    lines = [f"Privacy notion of each method: in the legend.{a_only} δ = {delta}. Reported checkpoint: {', '.join(checkpoints)} "
             f"{which}. " + tuning]
    lines += [f"OUTSIDE THE BUDGET: {o}" for o in outside]
    return "\n".join(lines)


def _joint_releases(accounted: pd.DataFrame) -> str:
    """The caption's sentence on private methods trained without γ (their searches' runs have no γ) whose released models
    stand at several γ: each repetition selects them from the same runs, one joint release that no printed ε covers."""
    if "phase" not in accounted or "epsilon" not in accounted:
        return ""
    joint = []
    eps, gamma = pd.to_numeric(accounted["epsilon"], errors="coerce"), pd.to_numeric(accounted["gamma"], errors="coerce")
    for method, rows in accounted[np.isfinite(eps)].groupby("method"):  # private methods (a non-private one spends nothing)
        trained, released = gamma[rows.index[rows["phase"] == 1]], gamma[rows.index[rows["phase"] == 2]]
        if len(trained) and (trained.isna() | (trained < 0)).all() and released[released >= 0].nunique() > 1:  # γ-free: NaN (or -1)
            joint.append(str(method))
    if not joint:
        return ""
    return (f" {', '.join(joint)} {'is' if len(joint) == 1 else 'are'} trained without γ: each repetition selects its models at every γ from "
            "the same runs, so those points together are one joint release that no stated ε covers (each alone is covered).")


def caption(fig, text: str, y: float) -> None:
    """The privacy caption under a figure, wrapped to the figure's width (a one-line caption wider than the figure
    would widen the saved image with blank margins)."""
    width = max(60, int(fig.get_figwidth() * 19))  # about 19 characters per inch at 7 pt
    lines = [textwrap.fill(line, width) for line in text.split("\n")]
    fig.text(0.5, y, "\n".join(lines), ha="center", va="top", fontsize=7)


def _two_sided(spreads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(below, above) of bars given as one spread per point or as two rows (below, above), matplotlib's ``yerr``."""
    return (spreads[0], spreads[1]) if spreads.ndim == 2 else (spreads, spreads)


def readable_limits(centres: np.ndarray, spreads: np.ndarray, keep: np.ndarray | None = None) -> tuple[float, float, float]:
    """(low, high, cap) for a y-axis (``spreads``: each point's bar, symmetric or as rows (below, above)): everything
    shown, unless a few points lie far above the rest (a configuration that collapsed on some seeds, say); then the top
    is capped at Q3 + 3·IQR of the centres (never below the points in ``keep``, the non-dominated ones) and the points
    above it are drawn at the cap and marked (:func:`mark_clipped`).
    "Far" is the smaller of Q3 + 3·IQR and the median + 8 robust standard deviations (1.4826·MAD, at least 0.05)."""
    c = np.asarray(centres, dtype=float)
    below, above = _two_sided(np.nan_to_num(np.asarray(spreads, dtype=float), nan=0.0))
    ok = np.isfinite(c)
    if not ok.any():
        return 0.0, 1.0, math.inf
    c, below, above = c[ok], below[ok], above[ok]
    q1, med, q3 = np.percentile(c, [25, 50, 75])
    mad = 1.4826 * float(np.median(np.abs(c - med)))  # robust spread: a few collapsed points move neither it nor the median
    cap = min(q3 + 3.0 * max(q3 - q1, 0.01), med + max(8.0 * mad, 0.05))
    if keep is not None and np.isfinite(keep).any():
        cap = max(cap, float(np.nanmax(keep)))
    highest = float(np.max(c + above))  # ≥ every centre (spreads are ≥ 0)
    top, bottom = min(highest, cap), float(np.min(c - below))
    pad = 0.05 * max(top - bottom, 0.01)
    return bottom - pad, top + pad, cap if highest > cap else math.inf


def mark_clipped(ax, xs, ys, cap: float, color: str, label_values: bool, top: float) -> None:
    """Points whose centre is above ``cap``: a ▲ at the top of the axis with their value (phase-2 points) or alone (phase 1)."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    over = np.isfinite(ys) & (ys > cap)
    for x, y in zip(xs[over], ys[over]):
        ax.scatter([x], [top], marker="^", s=30 if label_values else 10, color=color, alpha=0.9 if label_values else 0.3, clip_on=False, zorder=5)
        if label_values:
            edge_label(ax, f"{y:.2f}", (x, top), (0, -9), "center", color, ALONG_X)


def suptitle(fig, title: str) -> None:
    """The figure's title above the panels' own titles, wrapped to the figure's width (a wider title would widen the
    saved image): anchored at its bottom line, so extra lines grow upwards."""
    width = max(50, int(fig.get_figwidth() * 13))  # about 13 characters per inch at 10 pt
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=10, y=0.96, va="bottom")


LEGEND_ROW_IN = 0.19  # height of a legend row at 8 pt, in inches


LEGEND_CHAR_IN = 0.058  # width of a legend character at 8 pt, in inches
LEGEND_ENTRY_IN = 0.55  # a legend entry's marker, padding and column spacing


def legend_columns(fig, labels: list[str]) -> int:
    """As many legend columns as entries of the longest label fit across the figure: a compact legend, never wider."""
    widest = LEGEND_ENTRY_IN + LEGEND_CHAR_IN * max((len(label) for label in labels), default=1)
    return max(1, min(len(labels), int(fig.get_figwidth() // widest)))


def below_axes(fig, bottom_axes, xlabel: str, handles: list, labels: list, ncol: int | None, caption_text: str) -> None:
    """Under the lowest panels, at fixed distances in inches (so that tall and short figures look alike): one x label
    shared by the panels (per-panel labels of neighbouring panels run into each other), the legend (``ncol`` columns,
    None: as many as fit), the caption."""
    height = fig.get_figheight()
    y0 = min(ax.get_position().y0 for ax in bottom_axes)
    fig.text(0.5, y0 - 0.36 / height, xlabel, ha="center", va="top", fontsize=10)
    legend_top = y0 - 0.62 / height
    ncol = ncol or legend_columns(fig, labels)
    fig.legend(handles, labels, loc="upper center", ncol=ncol, bbox_to_anchor=(0.5, legend_top), fontsize=8, frameon=False,
               handletextpad=0.4, columnspacing=1.2)
    rows = math.ceil(len(labels) / ncol)
    caption(fig, caption_text, legend_top - (rows * LEGEND_ROW_IN + 0.12) / height)


def save(fig, out: Path, stem: str) -> list[Path]:
    """Write the figure as PDF and PNG, after checking it for overlapping text and for selected points hidden under
    others (a :class:`LayoutWarning` names the pairs); values written at an axis's edge are first set apart
    (:func:`raco_bench.report.edge_labels.set_apart`)."""
    set_apart(fig)
    warn_overlaps(fig, f"{out.name}/{stem}")
    warn_marker_overlaps(fig, f"{out.name}/{stem}")
    paths = [out / f"{stem}.pdf", out / f"{stem}.png"]
    fig.savefig(paths[0], bbox_inches="tight", metadata={"CreationDate": None})  # no date: a regenerated page diffs only where it changed
    fig.savefig(paths[1], dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def _legend_entries(axes) -> tuple[list, list]:
    """Legend entries of all panels, each label once."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def _method_entries(methods, styles: dict, names: dict) -> tuple[list, list]:
    """One legend entry per method (its colour, marker and privacy notion), whatever each panel drew."""
    from matplotlib.lines import Line2D

    handles, labels = [], []
    for method in sorted(methods):
        color, marker = styles.get(method, PALETTE[-1])
        handles.append(Line2D([], [], marker=marker, color=color, linestyle="-", markersize=6))
        labels.append(names.get(method, method))
    return handles, labels


def _tidy_axis(ax, xscale: str, nonnegative: bool) -> None:
    """A log axis labels its decades only (minor labels collide); a non-negative quantity's axis starts at 0 at most."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator, NullFormatter

    ax.set_xscale(xscale)
    if xscale == "log":
        low, high = ax.get_xlim()
        decades = math.log10(high / low) if low > 0 and high > low else 1.0
        subs = (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 2.5 else (1.0,)  # labels fit a 4-inch panel
        # within less than half a decade LogLocator falls back to a dense linear locator whose labels collide: 4 bins
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4) if decades < 0.5 else LogLocator(base=10, subs=subs, numticks=7))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    elif nonnegative:
        low, high = ax.get_xlim()
        if low < 0:
            ax.set_xlim(0, high)


def _panels(epsilons: list[float]):
    n = max(1, len(epsilons))
    fig, axes = plt.subplots(1, n, figsize=(max(6.4, 4.2 * n), 3.8), squeeze=False, sharex=True, sharey=True)  # one panel: room for its legend
    return fig, list(axes[0])


GAMMA_FILLS = (("full", "filled"), ("none", "hollow"), ("left", "left half"), ("bottom", "bottom half"), ("right", "right half"),
               ("top", "top half"))  # a selected point's fill says the γ it was selected for (a key in the legend)
MARKER_PT = 6.0  # a selected point's marker size (points)
FLAG_MARK = "x"  # over a point the health rules flag (raco_bench.training.health): not worth reading
FLAG_GID = "health-flag"  # the gid of those marks


def gamma_fills(gammas) -> dict[float, str]:
    """Each γ's fill style, smallest γ filled; more γ than fills reuse them (the key says which)."""
    values = sorted({float(g) for g in gammas if g == g})
    return {g: GAMMA_FILLS[i % len(GAMMA_FILLS)][0] for i, g in enumerate(values)}


def _gamma_key(fills: dict[float, str]) -> tuple[list, list]:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", color="0.25", fillstyle=fill, linestyle="", markersize=MARKER_PT) for fill in fills.values()]
    return handles, [f"selected at γ = {g:g}" for g in fills]


def _limits(values: np.ndarray, spreads: np.ndarray, keep: np.ndarray, fixed: np.ndarray, log: bool) -> tuple[float, float, float]:
    """(low, high, cap) of an axis fitted to the selected points (:func:`readable_limits`, in log10 on a log axis) and
    always holding the ``fixed`` values (published points, γ lines)."""
    v, s, k, f = (np.asarray(a, dtype=float) for a in (values, spreads, keep, fixed))
    if log:
        positive, s = v > 0, _two_sided(s)[1]  # the bar above, in decades, either side
        s = np.where(positive, np.log10(np.where(positive, v + np.nan_to_num(s), 1.0)) - np.log10(np.where(positive, v, 1.0)), 0.0)
        v, k, f = (np.log10(np.where(a > 0, a, np.nan)) for a in (v, k, f))
    if not np.isfinite(v).any() and np.isfinite(f).any():
        v, s = f, np.zeros(len(f))
    low, high, cap = readable_limits(v, s, k)
    if np.isfinite(f).any():
        low, high = min(low, float(np.nanmin(f))), max(high, float(np.nanmax(f)))
        pad = 0.03 * (high - low)
        low, high = low - pad, high + pad
    if log:
        return 10 ** low, 10 ** high, 10 ** cap if math.isfinite(cap) else math.inf
    return low, high, cap


def tradeoff_figure(agg: pd.DataFrame, df: pd.DataFrame, out: Path, stem: str, x: str, y: str, xlabel: str, ylabel: str,
                    title: str, minimise_y: bool = True, references: pd.DataFrame | None = None,
                    reference_xy: Callable[[pd.DataFrame], tuple] = lambda r: (r["constraint_value"], r["error"]),
                    xscale: str = "linear", selections: list[dict] | None = None, gamma_lines: bool = False) -> list[Path]:
    """One panel per private ε; every method's selected configurations (one point per selection, filled by the γ it was
    selected for, with the spread over its phase-2 seeds), its non-dominated ones joined, its phase-1 configurations
    faint behind them. Non-private methods appear in every panel. The axes are fitted to the selected points (and the
    published ones): phase-1 points outside are not drawn and are counted in the caption, a selected point far from the
    rest is drawn at the edge with its value. ``gamma_lines``: the x-axis is the constrained quantity, so each γ is a
    line. Points that would hide each other are set apart sideways (:mod:`raco_bench.report.dodge`)."""
    from raco_bench.report.points import selected_points

    private_eps = sorted(e for e in agg["epsilon"].unique() if math.isfinite(e)) or [math.inf]
    styles, names = method_styles(df), method_labels(df)
    style = lambda m: styles.get(m, PALETTE[-1])  # noqa: E731
    points = selected_points(agg, selections)
    fills = gamma_fills(points["selected_gamma"])
    in_panel = lambda frame, eps: frame[(frame["epsilon"] == eps) | (~np.isfinite(frame["epsilon"]))]  # noqa: E731
    refs = []
    for eps in private_eps:
        if references is not None and not references.empty:
            ref = references[(references["epsilon"].isna()) | (references["epsilon"] == eps)]
            refs.append(ref.assign(notion=(ref["notion"] if "notion" in ref else pd.Series("", index=ref.index)).fillna("")))
        else:
            refs.append(pd.DataFrame())
    ref_xy = [np.column_stack([np.asarray(v, dtype=float) for v in reference_xy(r)]) if len(r) else np.zeros((0, 2)) for r in refs]
    fixed = np.concatenate(ref_xy) if ref_xy else np.zeros((0, 2))
    front_y = points[y].to_numpy(dtype=float)[_fronts(points, x, y, minimise_y)] if len(points) else np.zeros(0)
    lines = np.asarray(list(fills) if gamma_lines else [], dtype=float)  # each γ's line is on the axis too
    ranges = value_ranges(df)
    xlow, xhigh, xcap = _limits(points[x].to_numpy(dtype=float), _spread(points, x, ranges.get(x)), np.zeros(0),
                                np.concatenate([fixed[:, 0], lines]), xscale == "log")
    ylow, yhigh, ycap = _limits(points[y].to_numpy(dtype=float), _spread(points, y, ranges.get(y)), front_y, fixed[:, 1], False)
    if xscale != "log" and (agg[x].dropna() >= 0).all() and xlow < 0:
        xlow = 0.0
    fig, axes = _panels(private_eps)
    for ax in axes:
        ax.set_xscale(xscale)
        ax.set_xlim(xlow, xhigh)
        ax.set_ylim(ylow, yhigh)
    _tidy_axis(axes[0], xscale, nonnegative=False)
    hidden = total = moved = 0
    clipped = flagged = False
    for ax, eps, ref in zip(axes, private_eps, refs):
        phase1 = in_panel(agg[agg["phase"] == 1], eps)
        inside = phase1[x].between(xlow, xhigh) & phase1[y].between(ylow, yhigh)
        total, hidden = total + len(phase1), hidden + int((~inside).sum())
        for method, rows in phase1[inside].groupby("method"):
            color, marker = style(method)
            ax.scatter(rows[x], rows[y], s=10, color=color, alpha=0.25, marker=marker, linewidths=0, zorder=1)
        panel = in_panel(points, eps)
        shown_x = np.minimum(panel[x].to_numpy(dtype=float), xhigh)
        shown_y = np.minimum(panel[y].to_numpy(dtype=float), yhigh)
        ringed = panel.get("capped", pd.Series(False, index=panel.index)).fillna(False).astype(bool).to_numpy()
        placed_x, n_moved = dodge(ax, shown_x, shown_y, np.full(len(shown_x), MARKER_PT / 2))
        moved += n_moved
        panel = panel.assign(_x=placed_x, _sx=shown_x, _y=shown_y, _ring=ringed)
        for method, rows in panel.groupby("method"):
            color, marker = style(method)
            front = _fronts(rows, x, y, minimise_y)
            if len(front):
                line = rows.iloc[front].sort_values(x)
                ax.plot(line["_x"], line["_y"], "-", color=color, lw=1.5, zorder=2)
            for gamma, group in rows.groupby(rows["selected_gamma"].fillna(-1.0)):
                bars = ax.errorbar(group["_x"], group["_y"], xerr=_bars(group, x, ranges.get(x), "_sx"), yerr=_bars(group, y, ranges.get(y), "_y"),
                                   fmt=marker, color=color, ms=MARKER_PT, fillstyle=fills.get(float(gamma), "full"), capsize=2, alpha=0.9, zorder=3)
                bars.lines[0].set_gid(SELECTED)
                bars.lines[0].set_label(f"_{method} γ={gamma:g}")
            ring(ax, rows["_x"], rows["_y"], rows["_ring"], color)
            bad = ~rows.get("health", pd.Series("ok", index=rows.index)).isin(["ok", "capped"])
            if bad.any():
                flagged = True
                ax.scatter(rows["_x"][bad], rows["_y"][bad], marker=FLAG_MARK, s=28, color="black", linewidths=1.0, zorder=6, gid=FLAG_GID)
            for _, r in rows[(rows[x] > xhigh) | (rows[y] > yhigh)].iterrows():
                clipped = True
                if r[y] > yhigh:
                    mark_clipped(ax, [r["_x"]], [r[y]], yhigh, color, True, yhigh)
                if r[x] > xhigh:
                    edge_label(ax, f"▶ {r[x]:.2g}", (xhigh, r["_y"]), (-2, 6), "right", color, ALONG_Y)
        for (method, note), rows in (ref.groupby(["method", "notion"]) if len(ref) else []):
            rx, ry = (np.asarray(v, dtype=float) for v in reference_xy(rows))
            ax.scatter(rx, ry, marker="*", s=50, facecolor="none", edgecolor=style(method)[0], linewidths=1.0,
                       label=reference_label(method, note), zorder=3)
        if gamma_lines:
            for g in fills:
                if xlow < g < xhigh:
                    ax.axvline(g, color="0.55", lw=0.8, ls=":", zorder=0)
                    ax.text(g, 0.985, f"γ = {g:g}", transform=ax.get_xaxis_transform(), rotation=90, ha="right", va="top", fontsize=6,
                            color="0.4")
        ax.set_title(_eps_label(eps))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    handles, labels = _method_entries(agg["method"].unique(), styles, names)
    ref_handles, ref_labels = _legend_entries(axes)  # the published points, each source once
    gamma_handles, gamma_labels = _gamma_key(fills)
    key = _marker_key(df, capped_cap(points), hidden, total, clipped, flagged, moved)
    suptitle(fig, title)
    below_axes(fig, axes, xlabel, handles + ref_handles + gamma_handles, labels + ref_labels + gamma_labels, None,
               key + "\n" + privacy_caption(df))
    return save(fig, out, stem)


def _spread(frame: pd.DataFrame, col: str, within: Range | None = None) -> np.ndarray:
    """Each point's bar (:func:`_bars`), zero where the frame has none: what the axis must hold."""
    bars = _bars(frame, col, within)
    return np.zeros(len(frame)) if bars is None else bars


def _bars(frame: pd.DataFrame, col: str, within: Range | None = None, at: str | None = None):
    """The bars of ``col`` (its ``_sd`` column: the spread over phase-2 seeds, or an interval's half-width over repeats),
    clipped to ``within``, the range of its values (:mod:`raco_bench.report.ranges`), and measured from where the point is
    drawn (``at``, a column: a value beyond the axis is drawn at its edge; default: at its value): one spread per point,
    or rows (below, above) where a bar was clipped or the point is drawn elsewhere; None when the frame has none."""
    if col + "_sd" not in frame:
        return None
    v, s = frame[col].to_numpy(dtype=float), frame[col + "_sd"].to_numpy(dtype=float)
    p = v if at is None else frame[at].to_numpy(dtype=float)
    low, high = within if within is not None else (-math.inf, math.inf)
    with np.errstate(invalid="ignore"):
        same = p == v
        below = np.where(same & (v - s >= low), s, np.maximum(p - np.maximum(v - s, low), 0.0))
        above = np.where(same & (v + s <= high), s, np.maximum(np.minimum(v + s, high) - p, 0.0))
        unchanged = np.array_equal(below, s, equal_nan=True) and np.array_equal(above, s, equal_nan=True)
    return s if unchanged else np.vstack([below, above])


def _fronts(points: pd.DataFrame, x: str, y: str, minimise_y: bool) -> np.ndarray:
    """Positions (in ``points``) of its non-dominated points, per method and ε panel: each method's line."""
    idx: list[int] = []
    for _, rows in points.groupby(["method", "epsilon"], dropna=False):
        pts = np.column_stack([rows[x].to_numpy(dtype=float), rows[y].to_numpy(dtype=float) * (1 if minimise_y else -1)])
        idx += [int(points.index.get_loc(rows.index[i])) for i in frontier(pts)]
    return np.asarray(sorted(set(idx)), dtype=int)


def _marker_key(df: pd.DataFrame, cap: str, hidden: int, total: int, clipped: bool, flagged: bool, moved: int) -> str:
    """What the markers mean, as the caption's first lines (the legend keeps only methods, published points and γ)."""
    accounted = bool((df.get("tuning", pd.Series(dtype=str)) == "accounted").any())
    reported = ("the released models: mean ± sd over the search's repetitions" if accounted
                else "the selected configurations: mean ± sd over fresh phase-2 seeds")
    text = [f"Markers with bars: {reported}, filled by the γ they were selected for (legend); line: non-dominated. Faint: every phase-1 "
            "configuration (mean over its seeds)" + (f"; {hidden} of {total} lie outside the axes, fitted to the selected points, and are "
                                                     "not drawn." if hidden else ".")]
    if clipped:
        text.append("▲/▶ at the edge: a selected point off the axis, with its value.")
    if cap:
        text.append(CAPPED_LABEL.format(cap=cap) + ".")
    if flagged:
        text.append("×: flagged by the health rules (a constant or one-class predictor, or too few steps): not worth reading; notes on the page.")
    if moved:
        text.append(f"{moved} selected point(s) set apart sideways by half a marker width where another would hide them.")
    return " ".join(text)


def satisfaction_figure(rows: pd.DataFrame, df: pd.DataFrame, out: Path, stem: str, title: str) -> list[Path]:
    """Per ε (columns), against the target γ: the selected configuration's test constraint value with its spread and
    the line value = γ (top), its test error (middle), and the share of its phase-2 runs whose constraint value meets
    γ on test (bottom): a row of its own, so that no label sits on a marker."""
    eps_values = sorted(rows["epsilon"].unique(), key=lambda e: (not math.isfinite(e), e))
    styles, names = method_styles(df), method_labels(df)
    style = lambda m: styles.get(m, PALETTE[-1])  # noqa: E731
    ranges = value_ranges(df)
    n = len(eps_values)
    fig, axes = plt.subplots(3, n, figsize=(max(6.4, 4.4 * n), 8.4), squeeze=False, sharex=True, sharey="row",
                             gridspec_kw={"height_ratios": [3, 3, 2]})
    for j, eps in enumerate(eps_values):
        top, middle, bottom = axes[0][j], axes[1][j], axes[2][j]
        panel = rows[rows["epsilon"] == eps]
        lo, hi = float(panel["gamma"].min()), float(panel["gamma"].max())
        pad = 0.1 * (hi - lo if hi > lo else max(hi, 0.01))
        line = np.array([lo - pad, hi + pad])
        top.plot(line, line, "--", color="black", lw=1, label="constraint value = γ")
        for method, m in panel.groupby("method"):
            color, marker = style(method)
            m = m.sort_values("gamma")
            top.errorbar(m["gamma"], m["test_max_constraint"], yerr=_bars(m, "test_max_constraint", ranges.get("test_max_constraint")),
                         fmt=marker + "-", color=color, capsize=2)
            middle.errorbar(m["gamma"], m["test_error"], yerr=_bars(m, "test_error", ranges.get("test_error")), fmt=marker + "-", color=color,
                            capsize=2)
            ring(top, m["gamma"], m["test_max_constraint"], m.get("capped"), color)
            ring(middle, m["gamma"], m["test_error"], m.get("capped"), color)
            bad = ~m.get("health", pd.Series("ok", index=m.index)).isin(["ok", "capped"])
            for ax, col in ((top, "test_max_constraint"), (middle, "test_error")):
                if bad.any():
                    ax.scatter(m["gamma"][bad], m[col][bad], marker=FLAG_MARK, s=28, color="black", linewidths=1.0, zorder=6, gid=FLAG_GID)
            bottom.plot(m["gamma"], 100 * m["share_meeting"], marker + "-", color=color, ms=5)
        top.set_title(_eps_label(eps))
        bottom.set_ylim(-5, 105)
        if j == 0:
            top.set_ylabel("test constraint value")
            middle.set_ylabel("test error")
            bottom.set_ylabel("runs meeting γ (%)")
        for ax in (top, middle, bottom):
            ax.grid(alpha=0.3)
    handles, labels = _method_entries(rows["method"].unique(), styles, names)
    line_handles, line_labels = _legend_entries(axes[0])
    if capped_cap(rows):
        line_handles.append(capped_handle())
        line_labels.append(CAPPED_LABEL.format(cap=capped_cap(rows)))
    if "health" in rows and (~rows["health"].isin(["ok", "capped"])).any():
        from matplotlib.lines import Line2D

        line_handles.append(Line2D([], [], marker=FLAG_MARK, color="black", linestyle="", markersize=6))
        line_labels.append("×: flagged by the health rules, not worth reading (notes on the page)")
    suptitle(fig, title + "\n(bottom: share of the selected configuration's phase-2 runs meeting γ on test)")
    below_axes(fig, axes[2], "target γ", handles + line_handles, labels + line_labels, 2 if n == 1 else 3, privacy_caption(df))
    return save(fig, out, stem)
