"""Scripts run on the ranks of COMM_WORLD under mpiexec (``python -m tests.support.ranks.NAME``):
executor cases, a pipelined plan, the device seam's collectives and NCCL's groups, each printing
one JSON line for the test that launched it."""
