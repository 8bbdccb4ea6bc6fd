"""What the tests share: helpers (paths into the repository, the executor's named cases, plan files,
finite-difference and op checks, ONNX builders, the process table, loading a benchmark script); in
``doubles``, recording doubles of the GPU libraries and devices (cupy, cuDNN, NCCL, CUDA graphs); in
``ranks``, the scripts run on the ranks under mpiexec; in ``workers``, stand-in executor workers.
Data files live in tests/assets/."""
