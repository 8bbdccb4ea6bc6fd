"""Stand-in executor workers, each run as ``python -m tests.support.workers.NAME`` in place of
``executor.launch.worker`` (tests set ``executor.launch.mpiexec.WORKER_MODULE``): the stub runtime
for launcher tests, and workers with one piece of the decomposition broken on purpose, which
``--check`` must catch."""
