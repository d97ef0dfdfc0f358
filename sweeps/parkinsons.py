"""Sweep on parkinsons: every default method (RaCO-DP, DP-FERMI, SGDA, PF-LD, DP post-processing, budget tailoring) under demographic parity (sex).

    python sweeps/parkinsons.py [--smoke] [--epsilons ...] [--gammas ...] [--n-configs N] [--resume]
    ray submit cluster.yaml sweeps/parkinsons.py -- [args]
"""

import sys

from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.runner import main

SPEC = SweepSpec(dataset="parkinsons", constraint="demographic-parity")

if __name__ == "__main__":
    sys.exit(main(SPEC, sys.argv[1:]))
