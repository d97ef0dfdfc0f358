"""What a sweep records in the MLflow store and how it is read back, below both the sweep driver and the report: the
results reader (:mod:`raco_bench.records.results`) and the names of the artifacts the driver writes on its phase parents
(:mod:`raco_bench.records.artifacts`), and the throughput benchmark's records (:mod:`raco_bench.records.throughput`). The
report reads a sweep through these, never through the driver."""
