"""The optimiser step the executor runs and the profiler times: SGD with momentum, in place (one
weight, or every weight of a step at once); and
the two elementwise kernels PyTorch FSDP runs on a gradient before its reduction
(costmodel.layer.fsdp), timed by the profiler for the cost model."""

from __future__ import annotations

import numpy

from kernels.dispatch import device_kernel

#: elements of ``lr * v`` formed at once: the step's only temporary (1 MiB of float32)
CHUNK = 1 << 18


@device_kernel("sgd.update")
def sgd_momentum_update(w, v, g, lr: float, momentum: float, master=None):
    """``v = momentum * v + g; w -= lr * v`` (PyTorch's SGD with momentum, no dampening), in place
    on ``w`` and ``v``. Returns them. On the CPU ``lr * v`` is formed :data:`CHUNK` elements at a
    time, so the step holds no weight-sized temporary (AlexNet's first classifier weight is 151 MB:
    one more such array at the peak, unlike what the cost model counts).

    Mixed precision (``master``, float32): ``w`` is the 16-bit copy the kernels read, ``v`` float32;
    the float32 master takes the step and ``w`` becomes its rounding (Micikevicius et al. 2018)."""
    if master is not None:
        v *= momentum
        v += g.astype(v.dtype)
        master -= lr * v
        w[...] = master.astype(w.dtype)
        return w, v
    v *= momentum
    v += g
    if not isinstance(w, numpy.ndarray) or w.size <= CHUNK or not (w.flags.c_contiguous and v.flags.c_contiguous):
        w -= lr * v
        return w, v
    flat_w, flat_v = w.reshape(-1), v.reshape(-1)
    scratch = numpy.empty(CHUNK, dtype=v.dtype)
    for start in range(0, flat_w.size, CHUNK):
        stop = min(start + CHUNK, flat_w.size)
        part = scratch[:stop - start]
        numpy.multiply(flat_v[start:stop], lr, out=part)
        flat_w[start:stop] -= part
    return w, v


@device_kernel("sgd.update_many")
def sgd_momentum_update_many(weights: list, momenta: list, grads: list, lr: float, momentum: float,
                             masters: list | None = None):
    """:func:`sgd_momentum_update` of every ``(weights[i], momenta[i], grads[i], masters[i])`` (a
    master None where a weight has none), in place; the same results as one call each. On a GPU one
    multi-tensor launch per storage format (kernels.cuda.multi_tensor), as frameworks' fused
    optimisers make it (PyTorch's ``foreach`` SGD, apex's ``multi_tensor_apply``); on the host one
    call each."""
    for i, (w, v, g) in enumerate(zip(weights, momenta, grads)):
        sgd_momentum_update(w, v, g, lr, momentum, master=None if masters is None else masters[i])
    return weights, momenta


@device_kernel("grad.cast")
def cast_gradient(g):
    """``g`` cast to float32 into a new array (FSDP's ``flat_param.grad.to(reduce_dtype)``)."""
    return g.astype(numpy.float32)


@device_kernel("grad.scale")
def scale_gradient(g, factor: float):
    """``g /= factor`` in place (FSDP's pre- and postdivide of the gradient). Returns ``g``."""
    g /= g.dtype.type(factor)
    return g
