"""Usage errors that point at the fix: an unknown flag is reported with the usage of the command it was given to
(``raco-bench train``'s, not the top-level one) and the closest flag that command knows ("did you mean --epsilon?").

Kept free of heavy imports: the command line uses it before anything is loaded.
"""

from __future__ import annotations

import argparse
import difflib


def _chosen_subparser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub-)parser that ``args`` went through (``raco-bench audit whitebox`` -> whitebox's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _chosen_subparser(chosen, args)
    return parser


def closest_flag(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The flag of ``parser`` closest to ``word`` (a misspelling), or None when none is close."""
    flags = [s for action in parser._actions for s in action.option_strings if s.startswith("--")]
    found = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1, cutoff=0.6)
    return found[0] if found else None


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that arguments no parser knows are reported by the sub-command they were given
    to, with its usage and, for each unknown flag, the closest one it knows (exit 2, as argparse does)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        target = _chosen_subparser(parser, args)
        close = {word: closest_flag(target, word) for word in extras if word.startswith("-")}
        hints = [f"{flag} for {word}" if len(close) > 1 else flag for word, flag in close.items() if flag]
        target.error(f"unrecognized arguments: {' '.join(extras)}" + (f" (did you mean {', '.join(hints)}?)" if hints else ""))
    return args
