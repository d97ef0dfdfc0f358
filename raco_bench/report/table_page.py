"""The command line of a page drawn from one exported table (the search comparison, the step-budget ablation):
``export`` reads sweeps from MLflow into DIR/TABLE (an experiment exported again replaces its rows, so merging twice
changes nothing), ``page`` draws DIR's page from that table alone."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pandas as pd


def main(doc: str, table: str, export: Callable[[str, list[str]], pd.DataFrame], page: Callable[[Path], list[Path]],
         argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help=f"the sweeps' rows from MLflow into DIR/{table}")
    e.add_argument("--tracking-uri", required=True)
    e.add_argument("--experiment", action="append", required=True)
    e.add_argument("--out", required=True)
    g = sub.add_parser("page", help=f"draw DIR's page from DIR/{table}")
    g.add_argument("dir")
    args = p.parse_args(argv)
    if args.command == "page":
        for path in page(Path(args.dir)):
            print(path)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, path = export(args.tracking_uri, args.experiment), out / table
    if path.exists():
        old = pd.read_csv(path)
        rows = pd.concat([old[~old["experiment"].isin(args.experiment)], rows], ignore_index=True)
    rows.to_csv(path, index=False, float_format="%.6g")
    print(path)
    return 0
