"""dnnplan executor: runs a plan across MPI ranks, times it and checks its numerics."""
