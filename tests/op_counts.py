"""What a pack step asks of a device, observed on a CPU (docs/packs.md, "The GPU path"): the torch operations it
dispatches, counted, and the ones that would make a GPU's host wait (a value read back, host data copied up).

:class:`OperationCounter` is a ``TorchDispatchMode``: every aten operation the code dispatches passes through it.
:func:`to_meta` moves what a step works on to torch's ``meta`` device (shapes and dtypes without data), where the step
dispatches what it would dispatch on a GPU, on a machine with none: a read of a value (``.item()``, ``bool()``,
``.tolist()``, ``.numpy()``, ``.cpu()``, ``nonzero``, boolean-mask indexing, ``unique``) raises, since a meta tensor
has no value to read, and a copy of host data to the device (``torch.tensor(list, device=...)``) is an operation the
counter sees."""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# operations whose result the host must wait for on a GPU (a value, or an output shape that depends on values)
READS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::unique_dim", "aten::_unique", "aten::_unique2", "aten::unique_consecutive",
         "aten::masked_select", "aten::equal", "aten::is_nonzero", "aten::allclose", "aten::bincount", "aten::histc", "aten::item"}
UPLOADS = {"aten::lift_fresh", "aten::lift_fresh_copy", "aten::lift"}  # a tensor made from host data (torch.tensor(list))


class OperationCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it (``counts``, by name) and lists those that make a GPU's host wait
    (``reads``: a value read back; ``uploads``: host data copied to the device, which torch's copy waits for)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.reads: list[str] = []
        self.uploads: list[str] = []

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        self.counts[name] += 1
        if name in READS or (name in ("aten::index", "aten::index_put", "aten::index_put_")
                             and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in _flat(args[1]))):
            self.reads.append(name)
        if name in UPLOADS:
            self.uploads.append(name)
        if name in ("aten::_to_copy", "aten::copy_", "aten::to"):
            source = args[1] if name == "aten::copy_" else args[0]
            target = args[0].device if name == "aten::copy_" else kwargs.get("device", source.device)
            if isinstance(source, torch.Tensor) and torch.device(target).type != source.device.type:
                (self.reads if torch.device(target).type == "cpu" else self.uploads).append(f"{name} {source.device} -> {target}")
        return func(*args, **kwargs)


def _flat(items):
    return items if isinstance(items, (list, tuple)) else [items]


def to_meta(obj, memo: dict | None = None):
    """``obj`` with every tensor it holds (dataclass fields, attributes, cached properties, containers) replaced by a
    meta tensor of the same shape and dtype; ``memo`` maps the ids of the objects converted to their copies."""
    memo = {} if memo is None else memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        out = torch.empty(obj.shape, dtype=obj.dtype, device="meta")
    elif isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        out = type(obj)(to_meta(x, memo) for x in obj)
    elif isinstance(obj, dict):
        out = {("meta" if isinstance(k, torch.device) else k): to_meta(v, memo) for k, v in obj.items()}
        out = {(torch.device("meta") if k == "meta" else k): v for k, v in out.items()}
    elif type(obj).__module__.startswith(("raco_bench", "baselines")) and hasattr(obj, "__dict__") and not isinstance(obj, type):
        out = memo[id(obj)] = object.__new__(type(obj))  # known before its attributes: a cycle (a graph and its owner) ends here
        for key, value in vars(obj).items():
            object.__setattr__(out, key, to_meta(value, memo))
    else:
        out = obj
    memo[id(obj)] = out
    return out
