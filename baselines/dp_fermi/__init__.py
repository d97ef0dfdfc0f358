"""DP-FERMI (Lowy et al.), reimplemented (docs/methods/dp-fermi.md): :mod:`.plugin` (the method), :mod:`.ermi` (the ERMI
formulas), :mod:`.engine` (K configurations at once) and :mod:`.audit` (its white-box audit view)."""
