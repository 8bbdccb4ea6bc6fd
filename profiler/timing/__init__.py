"""Timing one kernel call: synthetic operands, the harness's policy on the CPU and on a GPU, calls timed side by side, and the companion load of ranks that share this computer."""
