"""Communication: collective algorithms and their costs, groups, fits, overlap, and each parallelism's traffic (pure)."""
