"""Sweep on Heart Disease Health Indicators (BRFSS 2015): a false-negative-rate bound on the positive class.

The default methods that support an FNR bound run (the paper compares RaCO-DP with non-private SGDA
there; DP-FERMI has no FNR regularizer and is left out by its plugin).

    python sweeps/heart.py [--smoke] [...]
    ray submit cluster.yaml sweeps/heart.py -- [args]
"""

import sys

from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.runner import main

SPEC = SweepSpec(dataset="heart", constraint="false-negative-rate", gammas=(0.3, 0.4, 0.5, 0.6))  # methods: every default one that supports FNR

if __name__ == "__main__":
    sys.exit(main(SPEC, sys.argv[1:]))
