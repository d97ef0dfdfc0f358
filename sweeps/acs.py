"""Sweep on folktables ACSEmployment (AL): demographic parity over the 9 RAC1P race groups (18 constraints).

    python sweeps/acs.py [--smoke] [...]
    ray submit cluster.yaml sweeps/acs.py -- [args]

Offline, the data is the 2017 1-Year 5,000-row Alabama sample: a substitute for the paper's 2018 5-Year
file, whose results are not comparable with the paper's.
"""

import sys

from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.runner import main

SPEC = SweepSpec(dataset="acs-employment", constraint="demographic-parity", experiment="acs-employment-demographic-parity")

if __name__ == "__main__":
    sys.exit(main(SPEC, sys.argv[1:]))
