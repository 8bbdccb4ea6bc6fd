"""Test support for the executor: named cases (network, batch, strategy family, algorithm) and a
worker that runs them under mpiexec (``python -m tests.support.run_case``)."""
