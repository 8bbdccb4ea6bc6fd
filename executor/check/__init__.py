"""``--check``: the distributed step's numerics against one process on the whole batch."""
