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

from raco_bench.report.marks import CAPPED_LABEL, capped_cap, capped_handle, ring  # noqa: E402
from raco_bench.report.overlap import warn_overlaps  # noqa: E402
from raco_bench.report.pareto import frontier  # noqa: E402
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
                  "the figure shows several repetitions and budgets, which together spend more.")
    else:
        tuning = "Hyperparameter tuning is not privacy-accounted."
    a_only = " A-only DP protects only the group (x and y public): NOT comparable with record DP." if any("A-only" in n for n in notions) else ""
    which = "(every method)" if len(checkpoints) == 1 else "(per series: the legend names each pipeline other than the default)"
    lines = [f"Privacy notion of each method: in the legend.{a_only} δ = {delta}. Reported checkpoint: {', '.join(checkpoints)} "
             f"{which}. " + tuning]
    lines += [f"OUTSIDE THE BUDGET: {o}" for o in outside]
    return "\n".join(lines)


def caption(fig, text: str, y: float) -> None:
    """The privacy caption under a figure, wrapped to the figure's width (a one-line caption wider than the figure
    would widen the saved image with blank margins)."""
    width = max(60, int(fig.get_figwidth() * 19))  # about 19 characters per inch at 7 pt
    lines = [textwrap.fill(line, width) for line in text.split("\n")]
    fig.text(0.5, y, "\n".join(lines), ha="center", va="top", fontsize=7)


def readable_limits(centres: np.ndarray, spreads: np.ndarray, keep: np.ndarray | None = None) -> tuple[float, float, float]:
    """(low, high, cap) for a y-axis: everything shown, unless a few points lie far above the rest (a configuration
    that collapsed on some seeds, say); then the top is capped at Q3 + 3·IQR of the centres (never below the points in
    ``keep``, the non-dominated ones) and the points above it are drawn at the cap and marked (:func:`mark_clipped`).
    "Far" is the smaller of Q3 + 3·IQR and the median + 8 robust standard deviations (1.4826·MAD, at least 0.05)."""
    c = np.asarray(centres, dtype=float)
    s = np.nan_to_num(np.asarray(spreads, dtype=float), nan=0.0)
    ok = np.isfinite(c)
    if not ok.any():
        return 0.0, 1.0, math.inf
    c, s = c[ok], s[ok]
    q1, med, q3 = np.percentile(c, [25, 50, 75])
    mad = 1.4826 * float(np.median(np.abs(c - med)))  # robust spread: a few collapsed points move neither it nor the median
    cap = min(q3 + 3.0 * max(q3 - q1, 0.01), med + max(8.0 * mad, 0.05))
    if keep is not None and np.isfinite(keep).any():
        cap = max(cap, float(np.nanmax(keep)))
    highest = float(np.max(c + s))  # ≥ every centre (spreads are ≥ 0)
    top, bottom = min(highest, cap), float(np.min(c - s))
    pad = 0.05 * max(top - bottom, 0.01)
    return bottom - pad, top + pad, cap if highest > cap else math.inf


def mark_clipped(ax, xs, ys, cap: float, color: str, label_values: bool, top: float) -> None:
    """Points whose centre is above ``cap``: a ▲ at the top of the axis with their value (phase-2 points) or alone (phase 1)."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    over = np.isfinite(ys) & (ys > cap)
    for x, y in zip(xs[over], ys[over]):
        ax.scatter([x], [top], marker="^", s=30 if label_values else 10, color=color, alpha=0.9 if label_values else 0.3, clip_on=False, zorder=5)
        if label_values:
            ax.annotate(f"{y:.2f}", (x, top), textcoords="offset points", xytext=(0, -9), ha="center", fontsize=6, color=color)


def suptitle(fig, title: str) -> None:
    """The figure's title above the panels' own titles, wrapped to the figure's width (a wider title would widen the
    saved image): anchored at its bottom line, so extra lines grow upwards."""
    width = max(50, int(fig.get_figwidth() * 13))  # about 13 characters per inch at 10 pt
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=10, y=0.96, va="bottom")


LEGEND_ROW_IN = 0.19  # height of a legend row at 8 pt, in inches


def below_axes(fig, bottom_axes, xlabel: str, handles: list, labels: list, ncol: int, caption_text: str) -> None:
    """Under the lowest panels, at fixed distances in inches (so that tall and short figures look alike): one x label
    shared by the panels (per-panel labels of neighbouring panels run into each other), the legend, the caption."""
    height = fig.get_figheight()
    y0 = min(ax.get_position().y0 for ax in bottom_axes)
    fig.text(0.5, y0 - 0.36 / height, xlabel, ha="center", va="top", fontsize=10)
    legend_top = y0 - 0.62 / height
    fig.legend(handles, labels, loc="upper center", ncol=ncol, bbox_to_anchor=(0.5, legend_top), fontsize=8, frameon=False)
    rows = math.ceil(len(labels) / ncol)
    caption(fig, caption_text, legend_top - (rows * LEGEND_ROW_IN + 0.12) / height)


def save(fig, out: Path, stem: str) -> list[Path]:
    """Write the figure as PDF and PNG, after checking it for overlapping text (a :class:`LayoutWarning` names the pairs)."""
    warn_overlaps(fig, f"{out.name}/{stem}")
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


def tradeoff_figure(agg: pd.DataFrame, df: pd.DataFrame, out: Path, stem: str, x: str, y: str, xlabel: str, ylabel: str,
                    title: str, minimise_y: bool = True, references: pd.DataFrame | None = None,
                    reference_xy: Callable[[pd.DataFrame], tuple] = lambda r: (r["constraint_value"], r["error"]),
                    xscale: str = "linear") -> list[Path]:
    """One panel per private ε; every method's configurations (phase 1, faint), its phase-2 points with
    their spread over seeds, and its non-dominated points joined. Non-private methods appear in every panel."""
    private_eps = sorted(e for e in agg["epsilon"].unique() if math.isfinite(e)) or [math.inf]
    styles, names = method_styles(df), method_labels(df)
    style = lambda m: styles.get(m, PALETTE[-1])  # noqa: E731
    fig, axes = _panels(private_eps)
    drawn = []  # (ax, x, y, sd, colour, phase, on the frontier): the y-limits are set once every panel is drawn
    for ax, eps in zip(axes, private_eps):
        panel = agg[(agg["epsilon"] == eps) | (~np.isfinite(agg["epsilon"]))]
        for method, rows in panel.groupby("method"):
            color, marker = style(method)
            p1 = rows[rows["phase"] == 1]
            ax.scatter(p1[x], p1[y], s=10, color=color, alpha=0.25, marker=marker, linewidths=0)
            drawn.append((ax, p1[x].to_numpy(), p1[y].to_numpy(), np.zeros(len(p1)), color, 1, np.zeros(len(p1), bool)))
            best = rows[rows["phase"] == 2]
            if best.empty:
                continue  # no selected configuration here: its phase-1 points alone, faint (never drawn as phase-2 means)
            pts = np.column_stack([best[x].to_numpy(), best[y].to_numpy() if minimise_y else -best[y].to_numpy()])
            ax.errorbar(best[x], best[y], xerr=best.get(x + "_sd"), yerr=best.get(y + "_sd"), fmt=marker, color=color, ms=5,
                        capsize=2, alpha=0.9)
            front = frontier(pts)
            if len(front):
                ax.plot(best[x].to_numpy()[front], best[y].to_numpy()[front], "-", color=color, lw=1.5)
            ring(ax, best[x], best[y], best.get("capped"), color)
            on_front = np.zeros(len(best), bool)
            on_front[front] = True
            sd = best.get(y + "_sd", pd.Series(0.0, index=best.index)).to_numpy()
            drawn.append((ax, best[x].to_numpy(), best[y].to_numpy(), sd, color, 2, on_front))
        if references is not None and not references.empty:
            ref = references[(references["epsilon"].isna()) | (references["epsilon"] == eps)]
            notion = ref["notion"] if "notion" in ref else pd.Series("", index=ref.index)
            for (method, note), rows in ref.assign(notion=notion.fillna("")).groupby(["method", "notion"]):
                rx, ry = (np.asarray(v, dtype=float) for v in reference_xy(rows))
                ax.scatter(rx, ry, marker="*", s=50, facecolor="none", edgecolor=style(method)[0], linewidths=1.0,
                           label=reference_label(method, note))
                drawn.append((ax, rx, ry, np.zeros(len(ry)), style(method)[0], 0, np.ones(len(ry), bool)))  # always on the axis
        ax.set_title(_eps_label(eps))
        ax.grid(alpha=0.3)
    for ax in axes:
        _tidy_axis(ax, xscale, nonnegative=bool((agg[x].dropna() >= 0).all()))
    axes[0].set_ylabel(ylabel)
    clipped = _set_readable_ylim(axes, drawn)
    handles, labels = _method_entries(agg["method"].unique(), styles, names)
    ref_handles, ref_labels = _legend_entries(axes)  # the published points, each source once
    key_handles, key_labels = _marker_key(df, clipped, capped_cap(agg))
    ncol = 2 if len(axes) == 1 else 3  # the legend no larger than the figure: no blank margins in the saved image
    suptitle(fig, title)
    below_axes(fig, axes, xlabel, handles + ref_handles + key_handles, labels + ref_labels + key_labels, ncol, privacy_caption(df))
    return save(fig, out, stem)


def _marker_key(df: pd.DataFrame, clipped: bool, cap: str = "") -> tuple[list, list]:
    """Legend entries that explain the markers: faint phase-1 configurations, the reported points, clipped points and
    capped models (``cap``: their cap on T, empty when none is capped)."""
    from matplotlib.lines import Line2D

    accounted = bool((df.get("tuning", pd.Series(dtype=str)) == "accounted").any())
    reported = ("released models: mean ± sd over the search's repetitions; line: non-dominated" if accounted
                else "selected configurations: mean ± sd over fresh phase-2 seeds; line: non-dominated")
    handles = [Line2D([], [], marker="o", color="0.4", alpha=0.3, linestyle="", markersize=4),
               Line2D([], [], marker="o", color="0.2", linestyle="-", markersize=5)]
    labels = ["faint: every phase-1 configuration (mean over its seeds)", reported]
    if clipped:
        handles.append(Line2D([], [], marker="^", color="0.2", linestyle="", markersize=5))
        labels.append("▲ at the top: off the axis (reported points: their value)")
    if cap:
        handles.append(capped_handle())
        labels.append(CAPPED_LABEL.format(cap=cap))
    return handles, labels


def _set_readable_ylim(axes, drawn) -> bool:
    """One y-range for all panels (they share the axis), from every drawn point (phase-1 ones without their spread),
    capped above collapsed outliers; out-of-range points marked. True when some point was off the axis."""
    if not drawn:
        return False
    centres = np.concatenate([d[2] for d in drawn])
    spreads = np.concatenate([d[3] for d in drawn])
    keep = np.concatenate([d[2][d[6]] for d in drawn])
    low, high, cap = readable_limits(centres, spreads, keep)
    if not math.isfinite(cap):
        return False
    for ax in axes:
        ax.set_ylim(low, high)
    for ax, xs, ys, _, color, phase, _ in drawn:
        mark_clipped(ax, xs, ys, high, color, phase == 2, high)
    return True


def satisfaction_figure(rows: pd.DataFrame, df: pd.DataFrame, out: Path, stem: str, title: str) -> list[Path]:
    """Per ε (columns), against the target γ: the selected configuration's test constraint value with its spread and
    the line value = γ (top), its test error (middle), and the share of its phase-2 runs whose constraint value meets
    γ on test (bottom): a row of its own, so that no label sits on a marker."""
    eps_values = sorted(rows["epsilon"].unique(), key=lambda e: (not math.isfinite(e), e))
    styles, names = method_styles(df), method_labels(df)
    style = lambda m: styles.get(m, PALETTE[-1])  # noqa: E731
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
            top.errorbar(m["gamma"], m["test_max_constraint"], yerr=m["test_max_constraint_sd"], fmt=marker + "-", color=color, capsize=2)
            middle.errorbar(m["gamma"], m["test_error"], yerr=m["test_error_sd"], fmt=marker + "-", color=color, capsize=2)
            ring(top, m["gamma"], m["test_max_constraint"], m.get("capped"), color)
            ring(middle, m["gamma"], m["test_error"], m.get("capped"), color)
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
    suptitle(fig, title + "\n(bottom: share of the selected configuration's phase-2 runs meeting γ on test)")
    below_axes(fig, axes[2], "target γ", handles + line_handles, labels + line_labels, 2 if n == 1 else 3, privacy_caption(df))
    return save(fig, out, stem)
