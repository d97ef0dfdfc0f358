"""Sweep on Heart Disease Health Indicators (BRFSS 2015): a false-negative-rate bound on the positive class.

RaCO-DP against non-private SGDA (the paper's FNR comparison); DP-FERMI has no FNR regularizer.

    python sweeps/heart.py [--smoke] [...]
    ray submit cluster.yaml sweeps/heart.py -- [args]
"""

import sys

from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.runner import main

SPEC = SweepSpec(dataset="heart", constraint="false-negative-rate", methods=("raco-dp", "sgda"), gammas=(0.3, 0.4, 0.5, 0.6))

if __name__ == "__main__":
    sys.exit(main(SPEC, sys.argv[1:]))
