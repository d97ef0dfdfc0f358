"""PF-LD (private fair Lagrangian dynamics; docs/methods/pf-ld.md): :mod:`.plugin`."""
