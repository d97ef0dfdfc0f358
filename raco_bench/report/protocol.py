"""The protocol a part's numbers come from, stated the same way on pages and figures.

"paper protocol": at least the papers' sizes (200 configurations × 5 seeds, then 20 fresh seeds) and their search
(``sweep.search`` = ``tpe``); anything smaller, or random search (``random``, or no ``sweep.search`` param: sweeps
from before the option), is a "reduced protocol (…)" with its sizes. Accounted tuning has its own protocol.
"""

from __future__ import annotations

PAPER_PROTOCOL = {"n_configs": 200, "phase1_seeds": 5, "phase2_seeds": 20}
PAPER_SEARCH = "tpe"
SEARCH_NAMES = {"tpe": "TPE search", "random": "random search"}


def _sizes(params: dict) -> dict[str, int] | None:
    try:
        return {k: int(float(params[f"sweep.{k}"])) for k in PAPER_PROTOCOL}
    except KeyError:
        return None


def protocol_kind(params: dict) -> str:
    """"paper protocol", "reduced protocol", "accounted tuning", or "" when the sweep logged no sizes."""
    sizes = _sizes(params)
    if sizes is None:
        return ""
    if params.get("sweep.tuning") == "accounted":
        return "accounted tuning"
    search = params.get("sweep.search") or "random"
    paper = all(sizes[k] >= v for k, v in PAPER_PROTOCOL.items()) and search == PAPER_SEARCH
    return "paper protocol" if paper else "reduced protocol"


def protocol_note(params: dict) -> str:
    """The protocol with its sizes and search (empty when the sweep logged no sizes)."""
    kind, sizes = protocol_kind(params), _sizes(params)
    if sizes is None:
        return ""
    if kind == "accounted tuning":
        return (f"accounted tuning: E[K] = {params.get('sweep.tuning_mean')} configurations per search, "
                f"{params.get('sweep.tuning_repeats')} repetitions")
    search = params.get("sweep.search") or "random"
    text = (f"{sizes['n_configs']} configurations × {sizes['phase1_seeds']} seeds, then {sizes['phase2_seeds']} fresh seeds, "
            f"{SEARCH_NAMES.get(search, search + ' search')}")
    if kind == "reduced protocol":
        return f"reduced protocol ({text}; the papers: 200 × 5, then 20, TPE search)"
    return f"paper protocol ({text})"
