"""dnnplan profiler: times the kernels of :mod:`kernels` (numpy/cupy) on this computer, and the
collectives under MPI, into profile tables the cost model looks up (docs/profiler.md)."""
