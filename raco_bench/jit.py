"""Loops compiled to machine code for a pack's per-row passes on a CPU (numba; docs/packs.md, "Fused row passes").

A pack step's per-row arrays hold every configuration's batch slots (256 configurations × about 1,100 slots: a
megabyte each). In eager torch each elementwise operation over them is one pass through memory, about 0.1 ms on these
CPUs, and a step chains a dozen of them. A loop compiled here does such a chain in one pass, element by element, in
vector registers.

:func:`kernel` compiles lazily, on the first call in a process (about half a second per kernel and argument
types), so importing a module that defines kernels costs nothing and numba is imported only where one runs. The
machine code is cached on disk beside the module's source where the module is a file; a module built from a string
(the planted-bug tests' mutants, ``tests/mutants.py``) compiles afresh, so a planted bug always reaches its kernel.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

# Reassociation lets a row's sum run in vector registers; signed zeros are not told apart. Division, square roots
# and infinities keep their exact IEEE meaning (no approximate reciprocals, no "no infinities" assumption): the
# clipping factor C / max(C, ‖g‖) must be the exact quotient.
FASTMATH = frozenset({"nsz", "contract", "reassoc"})


class Kernel:
    """A Python function of numpy arrays, compiled by numba (nopython mode) on its first call."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def compiled(self) -> Callable:
        import numba

        cache = os.path.isfile(self.fn.__code__.co_filename)  # False for a module built from a string
        return numba.njit(fastmath=set(FASTMATH), cache=cache, nogil=True, error_model="numpy")(self.fn)

    def __call__(self, *arrays):
        return self.compiled(*arrays)


def kernel(fn: Callable) -> Kernel:
    """Decorator: ``fn`` (loops over numpy arrays) compiled by numba when first called (:class:`Kernel`)."""
    return Kernel(fn)
