"""`raco-bench sweeps`: the sweeps a tracking store holds, each with its state and how much of it is recorded.

One row per sweep (its phase-parent runs share a sweep id): the experiment, the command that started it
(its provenance tag), each phase's state (RUNNING, KILLED, FAILED, FINISHED) and configurations recorded
out of planned, counted from the complete packs (a pack run's ``configurations`` tag), never from what a
scheduler reported (docs/sweeps.md, "Interrupts, failures and --resume").
"""

from __future__ import annotations

from raco_bench import tracking

PLANNED = "raco_bench.planned"  # a phase parent's tag: configurations the phase plans (set when the phase starts)
COMMAND = "raco_bench.command"


def list_sweeps(uri: str, experiment: str | None = None) -> list[dict]:
    """Every sweep of the store (or of one experiment), most recent first."""
    experiments = [(name, exp_id) for name, exp_id in tracking.experiment_names(uri).items() if experiment is None or name == experiment]
    if experiment is not None and not experiments:
        raise ValueError(f"no experiment {experiment!r} in {uri}; `raco-bench sweeps` without --experiment lists every sweep")
    rows: dict[tuple[str, str], dict] = {}
    for name, exp_id in experiments:
        ids = [exp_id]
        recorded: dict[tuple[str, str], int] = {}
        for pack in tracking.completed_packs(uri, exp_id):
            key = (pack.data.tags.get(tracking.SWEEP_ID, ""), pack.data.tags.get(tracking.PHASE, ""))
            recorded[key] = recorded.get(key, 0) + int(pack.data.tags.get("configurations", "0"))
        for parent in tracking.search_all(uri, ids, f"tags.`{tracking.KIND}` = 'phase'"):
            sweep, phase = parent.data.tags.get(tracking.SWEEP_ID, ""), parent.data.tags.get(tracking.PHASE, "")
            row = rows.setdefault((name, sweep), {"sweep_id": sweep, "experiment": name, "command": "", "started": parent.info.start_time,
                                                      "phases": {}})
            row["started"] = min(row["started"], parent.info.start_time)
            row["command"] = row["command"] or parent.data.tags.get(COMMAND, "")
            planned = parent.data.tags.get(PLANNED, parent.data.metrics.get("trials"))  # sweeps older than the tag: the finished count
            row["phases"][phase] = {"state": parent.info.status, "recorded": recorded.get((sweep, phase), 0),
                                    "planned": int(float(planned)) if planned is not None else None}
    out = sorted(rows.values(), key=lambda r: -r["started"])
    for r in out:
        states = [p["state"] for _, p in sorted(r["phases"].items())]
        r["state"] = next((s for s in states if s != "FINISHED"), "FINISHED")
    return out


def format_sweeps(rows: list[dict]) -> str:
    if not rows:
        return "no sweep in this store"
    lines = [f"{'sweep':12s}  {'experiment':36s}  {'state':8s}  {'phase 1':>14s}  {'phase 2':>14s}  command"]
    for r in rows:
        cells = []
        for phase in ("1", "2"):
            p = r["phases"].get(phase)
            cells.append("-" if p is None else f"{p['recorded']}/{p['planned'] if p['planned'] is not None else '?'} {p['state'][:3].lower()}")
        lines.append(f"{r['sweep_id']:12s}  {r['experiment'][:36]:36s}  {r['state']:8s}  {cells[0]:>14s}  {cells[1]:>14s}  {r['command']}")
    lines.append("phase cells: configurations recorded / planned, and the phase's state (run, kil, fai, fin)")
    return "\n".join(lines)
