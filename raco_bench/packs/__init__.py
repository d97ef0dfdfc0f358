"""Packs: K configurations trained in lockstep by a method's batched engine (docs/packs.md). :mod:`.run` is the driver,
:mod:`.engine` the protocol an engine follows, :mod:`.tensors` and :mod:`.rows` what every engine uses."""
