"""A dnnplan process's life: the stop signals it handles as Ctrl-C, and the child jobs (mpiexec, probes) that end with it."""
