"""`raco-bench bench data`: loading a large user table under its schema, time and peak memory (docs/datasets.md).

It writes a generated table (default 1,000,000 rows × 50 columns: the label, one group column, 40 numeric and 8
categorical features) as CSV and as Parquet, with its schema file, into a temporary folder. Then, for each format,
a fresh Python process loads it the way `raco-bench train --data --schema` does (:func:`raco_bench.data.load_dataset`:
read, check against the schema, split, encode) and reports the wall time of the load and its peak resident memory
(``VmHWM``, the whole process, imports included; the memory after the imports is printed beside it), with the CPU time
it used (every thread), which other work on the machine does not inflate as it does the wall time. The formats are
measured one after the other on the same machine in one run; the targets are the issue's (30 s, 4 GB). The machine's
load average is printed first: say it beside any figure taken from here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 30.0
TARGET_GB = 4.0
CATEGORIES = tuple(f"level{i}" for i in range(10))

# VmHWM is the peak resident memory of this process's own address space (ru_maxrss would carry the parent's over a fork)
MEASURE = """
import json, resource, sys, time
def peak_mb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024
def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
import raco_bench.data.catalog as catalog
before, cpu0 = peak_mb(), cpu_s()
t0 = time.perf_counter()
ds = catalog.load_dataset(schema=sys.argv[1], data=sys.argv[2])
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_s() - cpu0, "peak_mb": peak_mb(), "imports_mb": before, "rows": ds.n_rows,
                  "features": ds.n_features, "train_rows": len(ds.train)}))
"""


def write_table(folder: Path, rows: int, columns: int, seed: int = 0) -> tuple[Path, dict[str, Path]]:
    """The generated table (CSV and Parquet) and its schema file in ``folder``: (schema, {format: table})."""
    import numpy as np
    import pandas as pd

    n_cat = max(1, (columns - 2) // 6)
    n_num = columns - 2 - n_cat
    rng = np.random.default_rng(seed)
    data = {"label": rng.integers(0, 2, rows), "group": rng.choice(["a", "b", "c"], rows, p=[0.5, 0.3, 0.2])}
    for i in range(n_num):
        data[f"num{i}"] = rng.lognormal(3.0, 1.0, rows) if i % 4 == 0 else rng.normal(0.0, 1.0, rows)
    for i in range(n_cat):
        data[f"cat{i}"] = rng.choice(CATEGORIES, rows)
    frame = pd.DataFrame(data)
    tables = {"csv": folder / "table.csv", "parquet": folder / "table.parquet"}
    frame.to_csv(tables["csv"], index=False)
    frame.to_parquet(tables["parquet"], index=False)
    lines = ["name: bench-table", "label: {column: label, values: [0, 1], positive: 1, source: generated}",
             "groups: [{column: group, values: [a, b, c], source: generated}]", "features:"]
    for i in range(n_num):
        domain = "range: [0, 100000], mapping: log" if i % 4 == 0 else "range: [-5, 5]"
        lines.append(f"  num{i}: {{{domain}, source: generated}}")
    for i in range(n_cat):
        lines.append(f"  cat{i}: {{vocabulary: [{', '.join(CATEGORIES)}], source: generated}}")
    schema = folder / "table.yaml"
    schema.write_text("\n".join(lines) + "\n")
    return schema, tables


def measure(schema: Path, table: Path) -> dict:
    """Load ``table`` under ``schema`` in a fresh process: its time, peak memory and what it loaded."""
    out = subprocess.run([sys.executable, "-c", MEASURE, str(schema), str(table)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the generated table (default: %(default)s)")
    p.add_argument("--columns", type=int, default=50, help="its columns, label and group included (default: %(default)s)")
    p.add_argument("--formats", nargs="+", default=["csv", "parquet"], choices=["csv", "parquet"], help="formats to load (default: both)")
    p.add_argument("--json", default=None, help="also write the measurements to this file")
    args = p.parse_args(argv)
    if args.rows < 100 or args.columns < 4:
        p.error("--rows must be >= 100 and --columns >= 4")
    with tempfile.TemporaryDirectory(prefix="raco-bench-data-") as tmp:
        t0 = time.perf_counter()
        schema, tables = write_table(Path(tmp), args.rows, args.columns)
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
        print(f"generated {args.rows:,} rows x {args.columns} columns in {time.perf_counter() - t0:.0f} s "
              f"(CSV {tables['csv'].stat().st_size / 2**20:.0f} MB, Parquet {tables['parquet'].stat().st_size / 2**20:.0f} MB); "
              "loading each in a fresh process:", flush=True)
        results = {}
        for fmt in args.formats:
            r = measure(schema, tables[fmt])
            results[fmt] = r
            print(f"  {fmt:8s} load + check + split + encode {r['seconds']:6.1f} s ({r['seconds'] / TARGET_SECONDS:.2f} x the {TARGET_SECONDS:g} s target; "
                  f"{r['cpu_seconds']:.1f} CPU-seconds, every thread), "
                  f"peak memory {r['peak_mb'] / 1024:.2f} GB ({r['peak_mb'] / 1024 / TARGET_GB:.2f} x the {TARGET_GB:g} GB target; "
                  f"{r['imports_mb']:.0f} MB after the imports); {r['rows']:,} rows, {r['features']} encoded features", flush=True)
        if len(results) == 2:
            print(f"  parquet / csv: time {results['parquet']['seconds'] / results['csv']['seconds']:.2f}, "
                  f"peak memory {results['parquet']['peak_mb'] / results['csv']['peak_mb']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": args.rows, "columns": args.columns, **results}, indent=2))
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    return 0 if all(r["seconds"] < TARGET_SECONDS and r["peak_mb"] / 1024 < TARGET_GB for r in results.values()) else 1
