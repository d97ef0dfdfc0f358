"""Privacy budget tailoring, DPSE (Alabi & Wiggins; docs/methods/budget-tailoring.md): :mod:`.plugin` (the method) and
:mod:`.synthetic` (the paper's synthetic experiment, run by sweeps/tailoring_synthetic.py)."""
