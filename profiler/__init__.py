"""dnnplan profiler: the kernels (numpy/cupy), timing harness and profile tables."""
