"""What the tests share: helpers (paths into the repository, the executor's named cases and the
workers that run them under mpiexec, plan files, finite-difference and op checks, ONNX builders, the
process table, loading a benchmark script), recording doubles of GPU libraries (fake_cudnn, fake_nccl,
fake_devices) and, in ``workers``, stand-in executor workers. Data files live in tests/assets/."""
