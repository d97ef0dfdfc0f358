"""Sweep on credit: every default method that supports equalized odds (sex), the papers' second rate constraint.

    python sweeps/credit_eo.py [--smoke] [--epsilons ...] [--gammas ...] [--n-configs N] [--resume]
    ray submit cluster.yaml sweeps/credit_eo.py -- [args]
"""

import sys

from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.runner import main

SPEC = SweepSpec(dataset="credit", constraint="equalized-odds")

if __name__ == "__main__":
    sys.exit(main(SPEC, sys.argv[1:]))
