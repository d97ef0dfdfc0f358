"""What every batched engine (docs/packs.md) does with K configurations' tensors: restrict a pack's settings or state to
some configurations and put them back, copy them, group configurations into chunks of similar batch size, a fast softmax."""

from __future__ import annotations

import dataclasses

import torch


def take_rows(pack, index: torch.Tensor):
    """A pack's settings or state dataclass restricted to the configurations at ``index``: every tensor field
    (leading dimension K) indexed, every other field (flags, the step count) kept."""
    fields = {f.name: getattr(pack, f.name) for f in dataclasses.fields(pack)}
    return type(pack)(**{k: (v[index] if isinstance(v, torch.Tensor) else v) for k, v in fields.items()})


def tensor_fields(pack) -> list[str]:
    """The names of a pack's settings or state fields that hold tensors (leading dimension K), in field order."""
    return [f.name for f in dataclasses.fields(pack) if isinstance(getattr(pack, f.name), torch.Tensor)]


def cloned(pack):
    """A pack's settings or state with every tensor field copied (a state kept while the original is updated in place)."""
    return dataclasses.replace(pack, **{name: getattr(pack, name).clone() for name in tensor_fields(pack)})


def put_rows(whole, index: torch.Tensor, part):
    """``whole`` with the configurations at ``index`` replaced by ``part`` (a :func:`take_rows` of it, advanced);
    non-tensor fields (the step count) come from ``part``."""
    def merged(a, b):
        if not isinstance(a, torch.Tensor):
            return b
        out = a.clone()
        out[index] = b
        return out

    return type(whole)(**{f.name: merged(getattr(whole, f.name), getattr(part, f.name)) for f in dataclasses.fields(whole)})


def softmax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """softmax over the (class) dimension ``dim``; torch's kernel is slow for the few classes of these tasks."""
    e = torch.exp(z - z.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def chunk_budget(device: torch.device) -> int:
    """Bytes of padded per-slot arrays a chunk may hold: 1 GiB on a GPU, 64 MiB on a CPU."""
    return 2**30 if device.type == "cuda" else 2**26


def chunks(widths: list[int], per_slot: int, budget: int, slack: float = 1.25, members: list[int] | None = None) -> list[list[int]]:
    """The configurations of a step grouped into chunks, each padded to its widest batch.

    Sorted by this step's batch size, a chunk takes configurations while the widest stays within
    ``slack`` times the narrowest (plus 64 rows, so that small batches are not split finely) and
    the chunk's padded arrays fit ``budget``. Padding then wastes at most about a quarter of a
    chunk, whatever batch sizes the pack mixes, and a pack of similar batch sizes is one chunk: on
    a CPU a step costs mostly per operation, so fewer chunks are faster. ``members`` names the configurations that
    ``widths`` are of (default: their positions)."""
    order = sorted(range(len(widths)), key=widths.__getitem__)
    out: list[list[int]] = []
    for k in order:
        if out:
            first, chunk = widths[out[-1][0]], out[-1]
            if widths[k] <= slack * first + 64 and (len(chunk) + 1) * max(widths[k], 1) * per_slot <= budget:
                chunk.append(k)
                continue
        out.append([k])
    return out if members is None else [[members[k] for k in chunk] for chunk in out]


def batch_groups(batch: list[int]) -> tuple[list[list[int]], list[int]]:
    """The configurations that draw the same batch (``batch[i]``: which distinct batch configuration i draws), as groups
    of at least two in order of first appearance, and the others, sorted (docs/packs.md, "Shared batches")."""
    members: dict[int, list[int]] = {}
    for k, b in enumerate(batch):
        members.setdefault(b, []).append(k)
    return [g for g in members.values() if len(g) >= 2], sorted(g[0] for g in members.values() if len(g) < 2)


def padded_groups(groups: list[list[int]]) -> tuple[list[int], int]:
    """Groups of configurations as (slots, k): each group's members padded to the largest group size k by repeating its
    first member (a repeated configuration computes its own values twice), ready for
    :class:`~raco_bench.packs.rows.SharedRows` with ``group=k``."""
    k = max(len(g) for g in groups)
    return [m for g in groups for m in g + [g[0]] * (k - len(g))], k
