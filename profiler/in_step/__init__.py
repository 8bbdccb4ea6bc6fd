"""A plan's kernels and collectives timed in its training step's order and context: inside a run between its steps, or before it."""
