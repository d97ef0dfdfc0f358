"""The JSON artifacts a sweep logs on its phase parents, by name: the driver writes them (:mod:`raco_bench.sweeps.runner`,
:mod:`raco_bench.sweeps.store_privacy`) and the report reads them (:mod:`raco_bench.report.export`)."""

SELECTIONS_ARTIFACT = "selected_configurations.json"  # phase 2's parent: the configuration selected per (method, ε, γ)
RELEASED_ARTIFACT = "released_models.json"  # accounted tuning: what each repetition released, on the phase-1 parent
STORE_ARTIFACT = "store_epsilon.json"  # on every phase parent of a finished sweep: the store's ε (docs/privacy.md)
