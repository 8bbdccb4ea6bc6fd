"""Timing by a probe of the executor's run in a child job: its own time per layer pass, the wait for the slowest rank, a plan's collectives in their step's context."""
