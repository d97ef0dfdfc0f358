"""The audit table and figure of a report: each logged audit's ε̂ (a lower bound at its confidence) beside the
ε its configuration claims, and what the same audit reaches on an exact implementation of the claim."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from raco_bench.report import figures
from raco_bench.report.tables import markdown_table


def audit_label(row) -> str:
    variant = f", {row['variant']}" if row["variant"] and row["variant"] not in ("white-box", "one run") else ""
    return f"{row['method']} ({row['audit']}{variant}, {row['dataset']})"


def write_audits(df: pd.DataFrame, out: Path, stem: str = "audit") -> list[Path]:
    """``audit.csv``, ``audit.md`` and ``audit.{png,pdf}`` from :func:`raco_bench.audit.records.load_audits`'s table."""
    import matplotlib.pyplot as plt

    csv, md = out / f"{stem}.csv", out / f"{stem}.md"
    df.to_csv(csv, index=False)
    table = pd.DataFrame({
        "audit": [audit_label(r) for _, r in df.iterrows()],
        "claimed ε": df["epsilon_claimed"].map("{:.3f}".format),
        "audited ε̂ (lower bound)": [f"{e:.3f} ({c:.0%})" for e, c in zip(df["epsilon_audited"], df["confidence"])],
        "point estimate [interval]": [("" if pd.isna(p) else f"{p:.3f} ") + ("" if pd.isna(u) else f"[{lo:.3f}, {u:.3f}]")
                                      for p, lo, u in zip(df["epsilon_audited_point"], df["epsilon_audited"], df["epsilon_audited_upper"])],
        "exact claim, same runs": df["epsilon_ideal_at_runs"].map(lambda v: "" if pd.isna(v) else f"{v:.3f}"),
        "runs per world": df["runs_per_world"], "steps": df["steps"], "q": df["sampling_rate"],
    })
    md.write_text("Empirical privacy audits (`raco-bench audit`): the audited ε̂ is a lower bound on the ε the configuration "
                  "really spends, at the stated confidence; it must stay below the claimed ε. \"Exact claim, same runs\" is what the "
                  "same audit reaches on runs drawn from the accountant's own worst case: how tight this many runs can be.\n\n"
                  + markdown_table(table) + "\n\n" + "\n".join(f"- {audit_label(r)}: {r['note']}" for _, r in df.iterrows()) + "\n")
    fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(df) + 1.4))
    y = list(range(len(df)))[::-1]
    for yi, (_, r) in zip(y, df.iterrows()):
        ax.plot([r["epsilon_audited"], r["epsilon_claimed"]], [yi, yi], color="0.8", lw=4, solid_capstyle="butt", zorder=1)
        ax.scatter(r["epsilon_claimed"], yi, marker="|", s=250, color="black", zorder=3, label="claimed ε")
        ax.scatter(r["epsilon_audited"], yi, marker="o", color="C3" if r["epsilon_audited"] > r["epsilon_claimed"] else "C0", zorder=4,
                   label="audited ε̂ (lower bound)")
        if not pd.isna(r["epsilon_ideal_at_runs"]):
            ax.scatter(r["epsilon_ideal_at_runs"], yi, marker="x", color="0.35", zorder=4, label="exact claim, same runs")
    ax.set_yticks(y, [audit_label(r) for _, r in df.iterrows()], fontsize=8)
    ax.set_xlabel("ε")
    ax.set_xlim(left=0)
    handles, labels = ax.get_legend_handles_labels()
    keep = dict(zip(labels, handles))
    ax.legend(keep.values(), keep.keys(), fontsize=8, loc="lower right")
    ax.set_title("Empirical privacy audits: audited lower bound vs claimed ε", fontsize=10)
    return [csv, md] + figures.save(fig, out, stem)
