"""Starting and ending the ranks: ``mpiexec`` or the MPI job we are in, the per-rank worker, the
cores a node's ranks share, and interrupts."""
