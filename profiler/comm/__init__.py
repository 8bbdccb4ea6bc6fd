"""`dnnplan profile-comm`: collective micro-benchmarks under mpiexec, fitted to alpha, beta, gamma, into a table."""
