"""The expected values of the one-run audit's bounds from jax-privacy's implementation, for tests/test_one_run_audit.py.

    python scripts/one_run_fixture.py --auditing PATH/jax_privacy/auditing.py --scores SCORES.json [...] --out tests/fixtures/one_run_fdp_jax.json

jax-privacy itself does not install here (it needs jax), but its ``auditing`` module imports only dp-accounting, numpy
and scipy, so it runs on its own from the published wheel (``pip download jax-privacy==2.0.0 --no-deps``, then unzip).
This script loads that module from ``--auditing`` (nothing of it is copied here) and, for each score file written by
``raco-bench audit one-run --save-scores``, computes the guesses exactly as the suite makes them (the k highest scores
guessed in, the k lowest out, for each guess fraction) and records, for each (m, r, v) at the suite's Bonferroni level,
jax-privacy's f-DP bound (``_epsilon_one_run_fdp``, Mahloujifar et al.) and its Steinke–Nasr–Jagielski bound
(``_epsilon_one_run``), each from ε = 0. It adds a grid of (m, r, v) beyond the scores. The fixture records the
package version and the commands; the test recomputes the suite's bounds and compares.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from raco_bench.audit.one_run import guesses

GRID = [(m, r, v) for m, r in ((1000, 100), (1000, 400), (5000, 1000), (2000, 40)) for v in (r // 2 + r // 10, (3 * r) // 4, r)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--auditing", required=True, help="jax_privacy/auditing.py of an unpacked jax-privacy wheel")
    p.add_argument("--version", default="2.0.0", help="the jax-privacy version the module comes from (recorded)")
    p.add_argument("--scores", nargs="+", required=True, help="score files of raco-bench audit one-run --save-scores")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    spec = importlib.util.spec_from_file_location("jax_privacy_auditing", args.auditing)
    jax_auditing = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = jax_auditing  # its dataclasses look their module up there
    spec.loader.exec_module(jax_auditing)

    def expected(m: int, r: int, v: int, level: float, delta: float) -> dict:
        return {"m": m, "r": r, "v": v, "level": level, "delta": delta,
                "fdp": float(jax_auditing._epsilon_one_run_fdp(0.0, m, r, v, level, delta)),
                "snj": float(jax_auditing._epsilon_one_run(0.0, m, r, v, level, delta))}

    files = []
    for path in args.scores:
        record = json.loads(Path(path).read_text())
        scores, included = np.array(record["scores"]), np.array(record["included"], dtype=bool)
        fractions = tuple(record["guess_fractions"])
        level = (1 - record["confidence"]) / len(fractions)
        cases = [{"k": k, **expected(len(scores), r, v, level, record["delta"])} for k, r, v in guesses(scores, included, fractions)]
        files.append({"record": record, "cases": cases})
    grid = [expected(m, r, v, 0.05 / 6, 1e-5) for m, r, v in GRID]
    out = {"source": f"jax-privacy {args.version} (PyPI wheel), jax_privacy/auditing.py loaded on its own: _epsilon_one_run_fdp and "
                     "_epsilon_one_run with eps_lo = 0, significance = level, delta as given",
           "command": "python scripts/one_run_fixture.py --auditing .../jax_privacy/auditing.py --scores " + " ".join(Path(s).name for s in args.scores),
           "files": files, "grid": grid}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}: {sum(len(f['cases']) for f in files)} cases from {len(files)} score files, {len(grid)} grid points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
