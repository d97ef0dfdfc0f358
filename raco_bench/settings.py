"""Parsing and validating settings given as text (``--set key=value``) against a dataclass's field types.

Kept free of heavy imports so that the command line can use it before torch is loaded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def parse_value(key: str, raw: Any, annotation: Any) -> Any:
    """Parse ``raw`` (a string from the command line, or a value) to the annotated field type."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    ann = str(annotation)
    if text.lower() in {"none", "null"} and "None" in ann:
        return None
    try:
        if "bool" in ann:
            if text.lower() in {"1", "true", "yes"}:
                return True
            if text.lower() in {"0", "false", "no"}:
                return False
            raise ValueError
        if "int" in ann and "float" not in ann:
            return int(text)
        if "float" in ann:
            return float(text)
        return text
    except ValueError:
        raise ValueError(f"cannot parse {key}={raw!r} as {ann}") from None


def parse_dataclass(cls: type, overrides: dict[str, Any], owner: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)} for {owner}; known settings: {', '.join(sorted(known))}")
    values = {k: parse_value(k, v, known[k].type) for k, v in overrides.items()}
    obj = cls(**values)
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


def check_positive(obj: Any, *names: str, allow_zero: bool = False) -> None:
    for name in names:
        v = getattr(obj, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
        if not ok:
            raise ValueError(f"invalid {name}={v!r}: must be a finite number {'>= 0' if allow_zero else '> 0'}")
