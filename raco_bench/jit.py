"""Loops compiled to machine code for a pack's per-row passes on a CPU (numba; docs/packs.md, "Fused row passes").

A pack step's per-row arrays hold every configuration's batch slots (256 configurations × about 1,100 slots: a
megabyte each). In eager torch each elementwise operation over them is one pass through memory, about 0.1 ms on these
CPUs, and a step chains a dozen of them. A loop compiled here does such a chain in one pass, element by element, in
vector registers.

:func:`kernel` compiles lazily, on the first call in a process (about half a second per kernel and argument
types), so importing a module that defines kernels costs nothing and numba is imported only where one runs. The
machine code is cached on disk beside the module's source (``__pycache__``, or numba's user-wide cache directory where
that is not writable). numba keys its cache by the function's source file and the argument types, not by the compile
options; :data:`OPTIONS` are therefore part of the cache entries' names (:func:`options_tag`), so that changing them
never loads machine code compiled under others. A module built from a string (the planted-bug tests' mutants,
``tests/mutants.py``) compiles afresh, so a planted bug always reaches its kernel.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable

# Reassociation lets a row's sum run in vector registers; signed zeros are not told apart. Division, square roots
# and infinities keep their exact IEEE meaning (no approximate reciprocals, no "no infinities" assumption): the
# clipping factor C / max(C, ‖g‖) must be the exact quotient, and C = inf must compare equal to inf.
FASTMATH = frozenset({"nsz", "contract", "reassoc"})
OPTIONS = {"fastmath": sorted(FASTMATH), "nogil": True, "error_model": "numpy"}


def options_tag() -> str:
    """A short hash of :data:`OPTIONS` and numba's version, part of every cache entry's name."""
    import numba

    return hashlib.sha256(repr((OPTIONS, numba.__version__)).encode()).hexdigest()[:12]


class Kernel:
    """A Python function of numpy arrays, compiled by numba (nopython mode) on its first call."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def compiled(self) -> Callable:
        import numba

        options = {**OPTIONS, "fastmath": set(OPTIONS["fastmath"])}
        dispatcher = numba.njit(cache=False, **options)(self.fn)
        if os.path.isfile(self.fn.__code__.co_filename):  # not a module built from a string
            cache = _tagged_cache(self.fn)
            if cache is not None:
                dispatcher._cache = cache
        return dispatcher

    def __call__(self, *arrays):
        return self.compiled(*arrays)


def kernel(fn: Callable) -> Kernel:
    """Decorator: ``fn`` (loops over numpy arrays) compiled by numba when first called (:class:`Kernel`)."""
    return Kernel(fn)


def _tagged_cache(fn: Callable):
    """numba's on-disk cache for ``fn`` with :func:`options_tag` in its entries' names, or None where numba's cache
    classes are not as expected (the kernel then compiles in every process, which is slower but never wrong)."""
    try:
        from numba.core import caching

        tag = options_tag()

        class InTree(caching.InTreeCacheLocator):
            def get_disambiguator(self) -> str:
                return f"{super().get_disambiguator()}-{tag}"

        class UserWide(caching.UserWideCacheLocator):
            def get_disambiguator(self) -> str:
                return f"{super().get_disambiguator()}-{tag}"

        class Impl(caching.CompileResultCacheImpl):
            _locator_classes = [InTree, UserWide]

        class Cache(caching.FunctionCache):
            _impl_class = Impl

        return Cache(fn)
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return None
