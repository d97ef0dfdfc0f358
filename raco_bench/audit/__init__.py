"""Empirical privacy audits: lower bounds on ε from attacks, to set beside the accounted ε."""
