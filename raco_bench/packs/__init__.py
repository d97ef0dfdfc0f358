"""Packs: K configurations trained in lockstep by a method's batched engine (docs/packs.md). :mod:`.engine` is the protocol
an engine follows, :mod:`.tensors`, :mod:`.rows` and :mod:`.draws` what every engine uses, below the methods; the driver
that trains a pack with the single run's recorder (:mod:`raco_bench.training.pack`) and the memory model that sizes
packs (:mod:`raco_bench.training.pack_memory`) sit in ``training/``, above the methods."""
