"""Mutation checks' one helper: a copy of a module's source with planted edits, loaded as a fresh module."""

from __future__ import annotations

import importlib.util
import sys


def load_mutant(source: str, edits: list[tuple[str, str]], name: str, prefix: str, filename: str):
    """``source`` with each (old, new) edit applied (every ``old`` must occur exactly once, so a refactor that moves
    the code fails loudly instead of testing nothing), executed as a module registered in ``sys.modules``
    (dataclasses look their module up there); the caller pops it when done."""
    for old, new in edits:
        assert source.count(old) == 1, f"mutation {name!r}: {old!r} occurs {source.count(old)} times in {filename}; update the mutation"
        source = source.replace(old, new)
    module_name = prefix + "".join(c if c.isalnum() else "_" for c in name)
    spec = importlib.util.spec_from_loader(module_name, loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        exec(compile(source, f"<mutant: {name}>", "exec"), module.__dict__)  # noqa: S102 - our own file, mutated
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def first_catch(module, checks, guard: str | None = None) -> list[str]:
    """Run ``checks`` on a mutant until one fails; its name and message (empty when none does). A ValueError whose
    message holds ``guard`` counts too: the code's own guard refused the mutant. The mutant is unregistered after."""
    try:
        for check in checks:
            try:
                check(module)
            except AssertionError as exc:
                return [f"{check.__name__}: {exc}"]
            except ValueError as exc:
                if guard is None or guard not in str(exc):
                    raise
                return [f"{check.__name__}, by the code's own guard: {exc}"]
        return []
    finally:
        sys.modules.pop(module.__name__, None)
