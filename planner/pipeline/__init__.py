"""The pipeline search: stages, micro-batches and interleaving around the per-stage problem, its bounds, cuts and proof (pure)."""
