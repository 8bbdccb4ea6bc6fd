"""What only the prediction on this CPU needs: the executor's own time between kernels (dispatch),
ranks waiting for each other, the code around each collective, and a plan's kernels and
collectives timed in their step's context."""
