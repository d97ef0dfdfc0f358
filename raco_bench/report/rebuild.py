"""`raco-bench results DIR`: rebuild every results page under ``DIR`` from its study data, then the comparison, then
the generated blocks of ``DIR/README.md`` and of the README beside ``DIR`` (:mod:`raco_bench.report.overview`).

A page with ``parts/`` (:mod:`raco_bench.report.study`) is rebuilt from those files alone (no MLflow store, so it
works in a fresh clone); a page without (written before pages carried their data) is kept as it is, and the
comparison reads its ``satisfaction.csv`` and ``phase2_runs.csv`` as before; its ``noise_floor.csv`` is added
when missing and its dataset is here, so the comparison discounts the same γ on every page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from raco_bench.report.comparison import write_comparison
from raco_bench.report.noise_floor import measured_noise_floor
from raco_bench.report.overview import write_overview
from raco_bench.report.published_match import write_published_match
from raco_bench.report.results_page import build_page
from raco_bench.report.study import family_of, has_parts

REFERENCES = "references.csv"  # the published points beside the pages (results/references.csv)


@dataclass
class Rebuilt:
    """What :func:`rebuild_results` did: the pages rebuilt from their parts, the pages kept (no parts), the files written."""

    pages: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def rebuild_results(root: Path, references: Path | None = None) -> Rebuilt:
    """Rebuild each page in ``root`` that has parts (overlaying ``references``, default ``root/references.csv`` when it
    exists), then write the comparison of every page and, with published points, the match against them; returns what
    was done."""
    if references is None and (root / REFERENCES).is_file():
        references = root / REFERENCES
    done = Rebuilt()
    for page in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if has_parts(page):
            done.files += build_page(page, references)
            done.pages.append(page)
        elif (page / "satisfaction.csv").is_file():
            done.kept.append(page)
            done.files += _kept_page_floor(page)
    done.files += write_comparison(root)
    if references is not None:
        done.files += write_published_match(root, references)
    done.files += write_overview(root, root.parent / "README.md")  # the generated blocks of the index and the project README
    return done


def _kept_page_floor(page: Path) -> list[Path]:
    """A kept page's noise floor (measured when missing and its dataset is here), which the comparison reads."""
    runs = page / "phase2_runs.csv"
    if not runs.is_file():
        return []
    first = pd.read_csv(runs, usecols=lambda c: c in ("dataset", "constraint", "constraint_spec"), nrows=1)
    return measured_noise_floor(page, str(first["dataset"].iloc[0]), str(first["constraint"].iloc[0]), spec=family_of(first).spec)[1]
