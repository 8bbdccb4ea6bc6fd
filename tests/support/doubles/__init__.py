"""Recording doubles of the GPU libraries and devices (cupy, cuDNN's frontend, NCCL, CUDA graphs, a
device whose arrays are not the host's, an on-demand compute model), so the GPU path is tested on
a computer without one."""
