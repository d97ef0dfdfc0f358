"""What a sweep records in the MLflow store and how it is read back, below both the sweep driver and the report: the
results reader (:mod:`raco_bench.records.results`) and the names of the artifacts the driver writes on its phase parents
(:mod:`raco_bench.records.artifacts`). The report reads a sweep through these, never through the driver."""
