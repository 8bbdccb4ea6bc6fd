"""dnnplan executor: runs a plan across MPI ranks, times it and checks its numerics.

Its rooms, in the order a run goes (docs/architecture.md): ``session`` (the libraries behind
`execute`, `validate` and `predict`), ``launch`` (mpiexec, the per-rank worker), ``runtime`` (a
rank's stage and training steps), ``ops`` (distributed forward and backward per op family),
``comm`` (groups, collectives, reshards, pipeline messages), ``backend`` (the device: arrays,
memory, clock, collectives; host: numpy + MPI), ``check`` (numerics against one process),
``probes`` (what only the prediction on this CPU needs) and ``report`` (predicted against
measured)."""
